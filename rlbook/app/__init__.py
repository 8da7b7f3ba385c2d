"""The book's machinery, apart from the library's mathematics and algorithms.

The modules beside this package (``rlbook.returns``, ``rlbook.advantages``, ``rlbook.losses``, ...)
are the derivations as code that the chapters teach; this package holds what turns them into a
book and a course:

* :mod:`~rlbook.app.chapters`: finding and listing the chapter notebooks;
* :mod:`~rlbook.app.cli`: the ``rlbook`` command (``list``, ``run``; the others added by the modules below);
* :mod:`~rlbook.app.site`: ``rlbook book``, the static website (Jupyter Book);
* :mod:`~rlbook.app.explore` and :mod:`~rlbook.app.explore_kernels`: ``rlbook explore``, the live
  explorers (Voilà) and the bounded, culled kernels behind them;
* :mod:`~rlbook.app.kernel_client`: the kernel client that ``rlbook explore``, ``rlbook run`` and the
  grader drive kernels with (it cannot miss a reply already in its socket);
* :mod:`~rlbook.app.claims` and :mod:`~rlbook.app.headline`: tying the numbers in the prose to the
  cells that compute them (``rl.claim``), and a chapter's headline result (``rl.report_headline``);
* :mod:`~rlbook.app.exercises`: the coded exercises' checkers (``rl.exercises.check``);
* :mod:`~rlbook.app.assignments` and :mod:`~rlbook.app.grading`: ``rlbook assignments``, the course
  assignments released and graded by nbgrader, and the sandbox that grades them.

Nothing here is imported with the library's names (on the first ``rl.<name>``) except ``claims`` and
``headline``, whose public names the chapters use as ``rl.<name>``; the package itself imports nothing.
"""
