"""The stored outputs of every chapter are what a reader sees on the site: nothing of the machine that built them.

For each ``notebooks/NN_*.ipynb`` this fails on

* a stderr stream, or a Python warning (``...Warning:``) printed anywhere;
* a filesystem path of the building machine (``/work/``, ``/home/``, ``/tmp/``, ``/root/``,
  ``site-packages``, a virtual environment, ...) in any output or saved widget;
* an ANSI escape (terminal colour codes show as ``[0;31m`` on a page);
* a saved progress bar that is red (tqdm's sign of a crashed loop) or that belongs to transformers'
  weight loading/saving ("Loading weights", "Writing model shards");
* clutter: a cell whose result echoes a bare number or a quoted string (the value an ``rl.claim`` or
  ``rl.report_headline`` returned, printed a second time), and raw TeX (``$…$``) in printed text.

Fix a failure at its source (the chapter's code or the library call that printed it) and rebuild
the chapter with ``tools/build_notebooks.py``; never by editing the stored output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

WARNING = re.compile(r"\b[A-Z]\w*Warning\b(?::|\s*\()")
MACHINE_PATH = re.compile(r"(?:/work/|/home/|/tmp/|/root/|/Users/|/usr/(?:local/)?lib/|/opt/|/var/folders/|"
                          r"site-packages|dist-packages|/\.?venv[\w.-]*/|\.pyenv|/conda/|[A-Z]:\\\\)")
ANSI = re.compile(r"\x1b\[|\u001b")
BARE_VALUE = re.compile(r"""\s*(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|'[^'\n]*'|"[^"\n]*"|None|True|False)\s*""")
RAW_TEX = re.compile(r"\$[^$\n]*\\[A-Za-z]+[^$\n]*\$|\$[^$\n\s]{1,3}\$|\$[^$\n]+[=^_][^$\n]*\$")
WEIGHT_BAR = re.compile(r"(Loading|Writing)[\s\u2007]+(weights|model[\s\u2007]+shards)")  # tqdm writes spaces as U+2007


def _texts(output: dict) -> list[str]:
    """Every piece of text an output carries (stream text, each text-like MIME type, a traceback)."""
    if output["output_type"] == "stream":
        return ["".join(output["text"]) if isinstance(output["text"], list) else output["text"]]
    if output["output_type"] == "error":
        return ["\n".join(output.get("traceback", [])), output.get("evalue", "")]
    texts = []
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/") or mime.endswith("json"):
            texts.append(value if isinstance(value, str) else json.dumps(value))
    return texts


def _widget_states(nb: dict) -> list[dict]:
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return list(state.get("state", {}).values())


def problems(nb: dict) -> list[str]:
    """Every defect of a notebook's stored outputs, one line each ("cell 12: ...")."""
    found = []
    for index, cell in enumerate(nb.get("cells", [])):
        for output in cell.get("outputs", []):
            where = f"cell {index} ({output['output_type']})"
            if output["output_type"] == "stream" and output.get("name") == "stderr":
                found.append(f"{where}: stderr output {_texts(output)[0][:120]!r}")
            if output["output_type"] == "error":
                found.append(f"{where}: an error ({output.get('ename')})")
            for text in _texts(output):
                for name, pattern in (("a warning", WARNING), ("a machine path", MACHINE_PATH), ("an ANSI escape", ANSI),
                                      ("transformers' weight progress bar", WEIGHT_BAR)):
                    if m := pattern.search(text):
                        found.append(f"{where}: {name}: {text[max(0, m.start() - 60):m.end() + 60]!r}")
            if output["output_type"] == "execute_result":
                plain = output.get("data", {}).get("text/plain", "")
                plain = "".join(plain) if isinstance(plain, list) else plain
                if BARE_VALUE.fullmatch(plain):
                    found.append(f"{where}: the cell echoes a bare value {plain[:80]!r} (end it with a statement, or `;`)")
            if output["output_type"] == "stream" and output.get("name") == "stdout":
                if m := RAW_TEX.search(_texts(output)[0]):
                    found.append(f"{where}: raw TeX in printed text {m.group(0)!r} (print Unicode: rl.plain_text)")
    for widget in _widget_states(nb):
        state = widget.get("state", {})
        if widget.get("model_name") in ("FloatProgressModel", "IntProgressModel") and state.get("bar_style") == "danger":
            found.append(f"widget: a red progress bar at {state.get('value')}/{state.get('max')} (close it with the reason)")
        text = json.dumps(state, ensure_ascii=False)
        for name, pattern in (("a machine path", MACHINE_PATH), ("an ANSI escape", ANSI),
                              ("transformers' weight progress bar", WEIGHT_BAR)):
            if m := pattern.search(text):
                found.append(f"widget: {name}: {text[max(0, m.start() - 60):m.end() + 60]!r}")
    return found


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 11


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_outputs_are_clean(path):
    found = problems(json.loads(path.read_text()))
    assert not found, f"{path.name}: {len(found)} problem(s) in the stored outputs:\n  " + "\n  ".join(found)


def _nb(*outputs, widgets=()):
    return {"cells": [{"cell_type": "code", "source": "", "outputs": list(outputs)}],
            "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": dict(enumerate(widgets))}}}}


def _stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def _result(plain):
    return {"output_type": "execute_result", "data": {"text/plain": plain}, "metadata": {}, "execution_count": 1}


@pytest.mark.parametrize("output, widgets, what", [
    (_stream("/work/venv/lib/python3.11/site-packages/transformers/modeling_utils.py:3312: FutureWarning: x\n", "stderr"),
     (), "stderr"),
    (_stream("UserWarning: Converting a tensor with requires_grad=True to a scalar\n"), (), "a warning"),
    (_stream("saved to /home/alice/rlbook/runs/sft\n"), (), "a machine path"),
    (_stream("saved to /tmp/rlbook-trl-policy-x1y2\n"), (), "a machine path"),
    (_stream("C:\\\\Users\\\\me\\\\rlbook\n"), (), "a machine path"),
    ({"output_type": "display_data", "data": {"text/html": "<pre>/builds/ci/.venv-ci/lib/python3.11/x.py</pre>"}, "metadata": {}}, (),
     "a machine path"),
    (_stream("\x1b[0;31mValueError\x1b[0m\n"), (), "an ANSI escape"),
    (_result("0.7217341843146787"), (), "bare value"),
    (_result("'[rlbook headline] PPO: 475 after 15,736 env steps'"), (), "bare value"),
    (_stream('✓ "by almost the full $V^\\pi\\approx 5$": 5.012\n'), (), "raw TeX"),
    (_stream("constant $\\alpha = 0.1$\n"), (), "raw TeX"),
    (_stream("ok\n"), ({"model_name": "FloatProgressModel", "state": {"bar_style": "danger", "value": 1, "max": 2}},),
     "red progress bar"),
    (_stream("ok\n"), ({"model_name": "HTMLModel", "state": {"value": "Loading\u2007weights:\u2007100%"}},), "weight progress bar"),
    (_result("Writing model shards:   0%|          | 0/1 [00:00<?, ?it/s]"), (), "weight progress bar"),
])
def test_the_checks_catch_what_they_should(output, widgets, what):
    found = problems(_nb(output, widgets=widgets))
    assert any(what in line for line in found), found


def test_the_checks_pass_clean_outputs():
    clean = _nb(_stream("✓ \"by almost the full V^π ≈ 5\": 5.012\nTD(0): 2 runs of 30000 steps in 7.1 s\n"),
                _stream("PPO: $5 per hour is not TeX; cost 3 $ and 4 $\n"),
                _result("VBox(children=(FloatSlider(value=0.2, description='ε_low'),))"),
                _result("<Figure size 400x300 with 1 Axes>"),
                {"output_type": "display_data", "data": {"text/plain": "a/b/c.py and https://arxiv.org/abs/2402.03300"},
                 "metadata": {}},
                widgets=({"model_name": "FloatProgressModel", "state": {"bar_style": "success", "value": 2, "max": 2}},
                         {"model_name": "HTMLModel", "state": {"value": "PPO, stopped at 475: 100%"}}))
    assert problems(clean) == []
