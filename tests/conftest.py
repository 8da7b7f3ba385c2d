import os

import pytest
import torch
from hypothesis import settings

# CI profile: reproducible examples, no per-example deadline (2-core machines are noisy).
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


def pytest_addoption(parser):
    parser.addoption(
        "--device", default=None,
        help="device the library and LM tests run on: cpu (the default, unless $RLBOOK_DEVICE is set), cuda "
             "or cuda:N; sets $RLBOOK_DEVICE for the run, so rl.get_device() and the `device` fixture return it")


def pytest_configure(config):
    """Set $RLBOOK_DEVICE before any test module is imported (module-level models use rl.get_device())."""
    value = config.getoption("--device") or os.environ.get("RLBOOK_DEVICE") or "cpu"
    os.environ["RLBOOK_DEVICE"] = value
    import rlbook as rl

    try:
        rl.get_device()  # a bad value or a missing GPU stops the run here, with the reason
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture
def device():
    """The torch.device the run tests on (``--device``; CPU by default)."""
    import rlbook as rl

    return rl.get_device()


@pytest.fixture
def one_thread():
    """Run a test with one torch thread (bit-for-bit reproducible training numbers), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _torch_globals_restored():
    """Every test starts from, and leaves, torch's default dtype, thread count and grad mode as they
    were: some tests run assignment or chapter code in this process (part 3's setup sets float64),
    and a leaked float64 default broke every later test that builds a float32 network."""
    dtype, threads, grad = torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled()
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)
    torch.set_grad_enabled(grad)


@pytest.fixture(scope="session")
def book_cli_build(tmp_path_factory):
    """``rlbook book --out DIR``, run once for the whole test run (about 15 s): ``(exit status, what it
    printed, DIR)``. The site tests and the browser tests share this build and only read it (printing
    the PDF adds a page to it and removes it again)."""
    import contextlib
    import io

    from rlbook.app import cli

    out, printed = tmp_path_factory.mktemp("site") / "_build", io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = cli.main(["book", "--out", str(out)])
    return status, printed.getvalue(), out


@pytest.fixture(scope="session")
def built_book_html(book_cli_build):
    """The built site's html folder (``book_cli_build``)."""
    status, printed, out = book_cli_build
    assert status == 0, printed
    return out / "html"
