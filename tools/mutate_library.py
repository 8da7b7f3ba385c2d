"""Mutation test of the library: which realistic single-line bugs in ``rlbook/`` does the default fast
suite catch?

The script parses the library's maths and algorithm modules (``MODULES``), lists every single-line
mutant an AST-based operator set can make (``OPERATORS``: an arithmetic operator swapped, a comparison
flipped at its boundary, a constant changed, a sign inserted or removed, ``.detach()`` removed or added,
``min``/``max`` and ``mean``/``sum`` swapped, a statement dropped, a ``dim``/``keepdim`` changed,
``and``/``or`` swapped or a ``not`` dropped, a return value replaced), draws a seeded sample spread over
the modules in proportion to their number of candidates (at least ``MIN_PER_MODULE`` each), and runs
each mutant in a copy of the repository (never in the checkout itself) against the fast tests that
can see it:

* the tests that execute the mutated line, read from one coverage run of the test files that name
  the module's public functions (``tests/test_*.py``, ``-m 'not slow'``; cached under
  ``runs/mutate_library/``, keyed by the sources of ``rlbook/`` and ``tests/``);
* for a line that runs at import (a default argument, a dataclass field, a module constant): every
  fast test of the test files that name the module's public names;
* a line inside a function that no fast test executes is a survivor without a run.

Each run is ``pytest -x -q -p no:cacheprovider -m 'not slow'`` over that selection, fastest tests
first, in a forked child of a worker that has imported torch and transformers (POSIX only). A mutant
is caught when the run fails, or when it runs past three times the selection's unmutated time plus
``TIMEOUT_SLACK`` (a timeout counts as caught). Mutants known to change nothing (``EQUIVALENT``, each with its
reason) are listed and left out of the share. The survivors go to ``runs/mutate_library/survivors.txt``.

    python tools/mutate_library.py                       # the default sample (seed 0, 320 mutants), 2 workers
    python tools/mutate_library.py --list                # the sample only, nothing run
    python tools/mutate_library.py --only KEY [KEY ...]  # these mutants (keys as printed)
    python tools/mutate_library.py --n 400 --seed 1 --workers 1

The workers run under ``nice -n 10`` with one torch thread each.

Measured when written (November 2026, seed 0: 328 mutants of 3,242 candidates, 12 equivalent):
248 of the 316 others caught outright by the suite of the day, 276 counting timeouts; 307 (97.2 %)
after the tests this run asked for. 61 minutes with 2 workers on a shared, loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "runs" / "mutate_library"

MODULES = [f"rlbook/{m}.py" for m in (
    "returns", "policy_gradient", "advantages", "importance", "losses", "kl", "trpo", "aggregation",
    "diagnostics", "values", "sequence_losses", "dppo", "rewards", "evaluation", "stats",
    "compute_curves", "steps", "preferences", "kl_regularised", "is_corrections", "entropy_control")] + [
    f"rlbook/algos/{m}.py" for m in ("grpo", "grpo_config", "grpo_rollouts", "ppo", "reinforce", "trpo", "dpo")] + [
    f"rlbook/lm/{m}.py" for m in ("checkpoint", "critic", "gpt2_fast", "logprobs", "model", "sampling", "sft",
                                  "standard", "task", "tokenizer", "dpo", "reward_model", "preference_task")]

# test files never used for the selection: machinery, browsers, the book's text
SKIP_TESTS = {"test_assignments.py", "test_grading.py", "test_packaging.py", "test_site.py", "test_explore.py",
              "test_book_text.py", "test_solutions_complete.py", "test_benchmark_results.py"}

DEFAULT_N, MIN_PER_MODULE = 320, 4
# a mutant's run is stopped (and counted as caught) after 3 × its selection's measured test time plus
# this slack, which covers pytest's start-up and collection on a loaded 2-core machine (30 s was too
# little: equivalent mutants timed out while other jobs held the cores)
TIMEOUT_SLACK = 180

# Mutants that change no behaviour, found by reading each survivor: key -> reason. The key is printed
# with each mutant (a hash of the file, the line as written and the mutant line, so it survives moves).
EQUIVALENT: dict[str, str] = {
    "8b0a57a550": "values.td0_policy_evaluation: a step size in (1, 2] let through here is refused, with the same "
                  "message, by td0_update at the first step (α_1 = step_size·1^(−p) = step_size)",
    "cdf417ffd9": "lm.sampling._sample_next is called only from sample_completions, which runs under "
                  "torch.no_grad(): a .detach() there changes nothing",
    "fbd7db8f1e": "algos.reinforce: the metrics go to History.log, which stores float(value): detaching the loss "
                  "first changes nothing",
    "74c967d645": "algos.grpo_rollouts: `pad_token_id or 1` differs only for a tokenizer without a pad id; pads come "
                  "after EOS under a False completion mask (no loss, metric or earlier logit sees them)",
    "10e501ec79": "algos.grpo_rollouts: the padding id of merged sampling rounds sits after EOS under a False "
                  "completion mask (no loss, metric or earlier logit sees it)",
    "6dd2d7fce5": "lm.logprobs._shared_prefix_logits: None means 'cannot share the prefix' and the caller falls back "
                  "to scoring the full rows, which gives the same logits for a one-token completion",
    "74e3585d5f": "policy_gradient.optimal_baseline: w.sum() > 0 iff w.mean() > 0 for the non-empty w it checks",
    "7c373787e5": "advantages.leave_one_out: the grouped view is 2-D (B/G, G), so dim=1 is dim=-1",
    "87dd64f382": "advantages.group_relative: the grouped view is 2-D (B/G, G), so dim=1 is dim=-1",
    "63b8c295ce": "diagnostics.effective_sample_size runs under @torch.no_grad(): a .detach() inside changes nothing",
    "c0be40abc9": "dppo.binary_kl: the placeholder log-prob at unused positions is replaced by torch.where in "
                  "the value, and its gradient is multiplied by 0 there; -1 and -2 are both finite",
    "3501d6dd78": "dppo.dppo_mask returns a bool mask: detaching log_probs before the comparisons changes nothing",
}

# ----------------------------------------------------------------------------------------------- mutants

SWAP_BIN = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*")}
SWAP_CMP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
            ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
            ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
SWAP_ATTR = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum", "amin": "amax", "amax": "amin",
             "argmin": "argmax", "argmax": "argmin", "clamp_min": "clamp_max", "clamp_max": "clamp_min",
             "mean": "sum", "sum": "mean", "nanmean": "nansum", "nansum": "nanmean"}
REDUCTIONS = {"sum", "mean", "softmax", "log_softmax", "logsumexp", "cumsum", "std", "var", "max", "min", "amax",
              "amin", "argmax", "argmin", "all", "any", "prod", "norm", "nansum", "nanmean", "flip", "squeeze",
              "unsqueeze", "gather", "count_nonzero", "cumprod", "diff"}
DETACH_NAMES = re.compile(r"log|ratio|value|logit|prob|adv|loss|kl|score|weight|surr|obj|entropy|grad|mean|std")
QUIET_CALLS = {"print", "warn", "warning", "info", "debug", "ValueError", "TypeError", "RuntimeError"}
OPERATORS = ("arith", "compare", "constant", "sign", "detach", "minmax", "meansum", "drop", "dim", "bool", "return")


class Mutant:
    __slots__ = ("path", "lineno", "op", "old", "new", "key", "stmt_lines", "toplevel")

    def __init__(self, path, lineno, op, old, new, stmt_lines, toplevel):
        self.path, self.lineno, self.op, self.old, self.new = path, lineno, op, old, new
        self.stmt_lines, self.toplevel = stmt_lines, toplevel
        self.key = hashlib.sha1(f"{path}\0{old.strip()}\0{new.strip()}".encode()).hexdigest()[:10]

    def label(self):
        return f"{self.path}:{self.lineno} [{self.op}] {self.key}"

    def as_dict(self):
        return {s: getattr(self, s) for s in self.__slots__}


def _parents(tree):
    parent = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    return parent


def _one_line(node):
    return getattr(node, "lineno", None) is not None and node.lineno == node.end_lineno


def mutants_of(path: str, text: str) -> list[Mutant]:
    """Every single-line mutant of one module (the operator set above), deduplicated, each one compiling."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    blines = [ln.encode() for ln in lines]
    parent = _parents(tree)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
                  and isinstance(n.body[0].value.value, str)}
    out: dict[tuple, Mutant] = {}

    def context(node):
        """(innermost statement, inside a function body?, skip?) for a node."""
        n, stmt, in_func = node, None, False
        while n in parent:
            p = parent[n]
            if stmt is None and isinstance(n, ast.stmt):
                stmt = n
            if isinstance(p, (ast.Raise, ast.Assert, ast.JoinedStr)) or id(n) in docstrings:
                return stmt, in_func, True
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if n in p.decorator_list or n is p.returns or n is p.args:
                    return stmt, False, n is not p.args  # defaults run at import
                in_func = True if stmt is not None else in_func
                if isinstance(n, ast.stmt):
                    return stmt, True, False
            if isinstance(p, ast.arg) or (isinstance(p, ast.AnnAssign) and n is p.annotation):
                return stmt, in_func, True
            if isinstance(p, ast.Call) and _call_name(p) in QUIET_CALLS:
                return stmt, in_func, True
            n = p
        return stmt, in_func, False

    def add(node, op, lineno, b0, b1, repl):
        stmt, in_func, skip = context(node)
        if skip:
            return
        old = lines[lineno - 1]
        raw = blines[lineno - 1]
        new = (raw[:b0] + repl.encode() + raw[b1:]).decode()
        if new == old:
            return
        if stmt is not None and isinstance(stmt, (ast.If, ast.While, ast.For, ast.With)):
            span = (stmt.lineno, max(stmt.lineno, node.end_lineno or lineno))
        elif stmt is not None:
            span = (stmt.lineno, stmt.end_lineno)
        else:
            span = (lineno, lineno)
        m = Mutant(path, lineno, op, old, new, list(range(span[0], span[1] + 1)), not in_func)
        out.setdefault((lineno, new), m)

    def gap(a, b):
        """The bytes between node a's end and node b's start (same line), and their offset."""
        if a.end_lineno != b.lineno:
            return None, None
        return blines[a.end_lineno - 1][a.end_col_offset:b.col_offset].decode(errors="replace"), a.end_col_offset

    for node in ast.walk(tree):
        # arithmetic: + <-> -, * <-> /
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            g, off = gap(node.left, node.right)
            old_tok, new_tok = SWAP_BIN[type(node.op)]
            if g is not None:
                i = _find_token(g, old_tok)
                if i is not None:
                    add(node, "arith", node.left.end_lineno, off + i, off + i + len(old_tok), new_tok)
        if isinstance(node, ast.AugAssign) and type(node.op) in SWAP_BIN:
            g, off = gap(node.target, node.value)
            old_tok, new_tok = SWAP_BIN[type(node.op)]
            if g is not None and (i := g.find(old_tok + "=")) >= 0:
                add(node.value, "arith", node.lineno, off + i, off + i + 1, new_tok)
        # comparisons at their boundary
        if isinstance(node, ast.Compare):
            prev = node.left
            for cop, right in zip(node.ops, node.comparators):
                if type(cop) in SWAP_CMP:
                    g, off = gap(prev, right)
                    old_tok, new_tok = SWAP_CMP[type(cop)]
                    if g is not None:
                        m = re.search(r"(?<![<>=!])" + re.escape(old_tok).replace(r"\ ", r"\s+") + r"(?![=<>\w])", g)
                        if m:
                            add(node, "compare", prev.end_lineno, off + m.start(), off + m.end(), new_tok)
                prev = right
        # constants: 0 <-> 1, n -> n + 1, x -> 2x (x + 1 for |x| < 1e-3), True <-> False
        if isinstance(node, ast.Constant) and _one_line(node) and id(node) not in docstrings \
                and not (isinstance(parent.get(node), ast.UnaryOp) and type(node.value) is int):
            v = node.value
            if isinstance(v, bool):
                rep = repr(not v)
            elif isinstance(v, int):
                rep = {0: "1", 1: "0"}.get(v, str(v + 1))
            elif isinstance(v, float):
                rep = repr(v * 2 if abs(v) >= 1e-3 else v + 1)
            else:
                rep = None
            if rep is not None:
                add(node, "constant", node.lineno, node.col_offset, node.end_col_offset, rep)
        # sign: an existing unary minus removed (not on a literal); one inserted before a returned or
        # assigned arithmetic result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _one_line(node) \
                and not isinstance(node.operand, ast.Constant):
            raw = blines[node.lineno - 1]
            if raw[node.col_offset:node.col_offset + 1] == b"-":
                add(node, "sign", node.lineno, node.col_offset, node.col_offset + 1, "")
        if isinstance(node, (ast.Return, ast.Assign)) and node.value is not None and _one_line(node.value) \
                and (isinstance(node.value, ast.BinOp) or isinstance(node, ast.Return) and isinstance(node.value, ast.Call)
                     and not _is_constructor(node.value)):
            v = node.value
            src = blines[v.lineno - 1][v.col_offset:v.end_col_offset].decode()
            add(v, "sign", v.lineno, v.col_offset, v.end_col_offset, f"-({src})")
        # .detach() removed / added
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
                and not node.args and _one_line(node):
            inner = node.func.value
            if _one_line(inner):
                src = blines[inner.lineno - 1][inner.col_offset:inner.end_col_offset].decode()
                add(node, "detach", node.lineno, node.col_offset, node.end_col_offset, src)
        if isinstance(node, ast.BinOp) and "torch" in text:
            for side in (node.left, node.right):
                if isinstance(side, ast.Name) and DETACH_NAMES.search(side.id) and _one_line(side):
                    add(side, "detach", side.lineno, side.end_col_offset, side.end_col_offset, ".detach()")
        # min <-> max, mean <-> sum
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("min", "max") and _one_line(f):
                add(node, "minmax", f.lineno, f.col_offset, f.end_col_offset, "max" if f.id == "min" else "min")
            if isinstance(f, ast.Attribute) and f.attr in SWAP_ATTR and f.end_lineno == f.value.end_lineno:
                raw = blines[f.end_lineno - 1]
                b1 = f.end_col_offset
                b0 = b1 - len(f.attr)
                if raw[b0:b1].decode() == f.attr:
                    op = "meansum" if f.attr in ("mean", "sum", "nanmean", "nansum") else "minmax"
                    add(node, op, f.end_lineno, b0, b1, SWAP_ATTR[f.attr])
            kws = {k.arg: k for k in node.keywords}
            if ("min" in kws) != ("max" in kws) and _call_name(node) in ("clamp", "clip", "clamp_"):
                k = kws.get("min") or kws.get("max")
                if _one_line(k.value):
                    raw = blines[k.value.lineno - 1]
                    b1 = k.value.col_offset
                    seg = raw[:b1].decode()
                    mm = re.search(r"(min|max)\s*=\s*$", seg)
                    if mm:
                        add(node, "minmax", k.value.lineno, mm.start(1), mm.end(1), "max" if k.arg == "min" else "min")
            # dim / keepdim
            for k in node.keywords:
                if k.arg == "keepdim" and isinstance(k.value, ast.Constant) and _one_line(k.value):
                    add(k.value, "dim", k.value.lineno, k.value.col_offset, k.value.end_col_offset,
                        repr(not k.value.value))
                if k.arg == "dim" and _one_line(k.value) and (d := _int_value(k.value)) is not None:
                    add(k.value, "dim", k.value.lineno, k.value.col_offset, k.value.end_col_offset, "0" if d == -1 else "-1")
            if isinstance(f, ast.Attribute) and f.attr in REDUCTIONS and node.args and _one_line(node.args[0]) \
                    and (d := _int_value(node.args[0])) is not None and f.attr != "norm":
                a = node.args[0]
                add(a, "dim", a.lineno, a.col_offset, a.end_col_offset, "0" if d == -1 else "-1")
        # and <-> or, not dropped
        if isinstance(node, ast.BoolOp) and len(node.values) >= 2:
            g, off = gap(node.values[0], node.values[1])
            old_tok, new_tok = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            if g is not None and (m := re.search(rf"\b{old_tok}\b", g)):
                add(node, "bool", node.values[0].end_lineno, off + m.start(), off + m.end(), new_tok)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and node.lineno == node.operand.lineno:
            raw = blines[node.lineno - 1]
            add(node, "bool", node.lineno, node.col_offset, node.operand.col_offset, "")
        # a statement dropped: a call made for its effect, an update in place, a reassignment
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigned: set[str] = {a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs}
            for st in sorted((s for s in ast.walk(node) if isinstance(s, ast.stmt) and s is not node),
                             key=lambda s: (s.lineno, s.col_offset)):
                if not _one_line(st) or id(getattr(st, "value", None)) in docstrings:
                    continue
                drop = (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
                        and _call_name(st.value) not in QUIET_CALLS) or isinstance(st, ast.AugAssign) \
                    or (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                        and st.targets[0].id in assigned)
                if drop and not isinstance(parent.get(st), (ast.If, ast.For, ast.While, ast.With)) or \
                        drop and len(getattr(parent.get(st), "body", [])) > 1:
                    add(st, "drop", st.lineno, st.col_offset, st.end_col_offset, "pass")
                if isinstance(st, ast.Assign):
                    assigned |= {t.id for t in st.targets if isinstance(t, ast.Name)}
                elif isinstance(st, (ast.AnnAssign, ast.AugAssign)) and isinstance(st.target, ast.Name):
                    assigned.add(st.target.id)
                elif isinstance(st, ast.For) and isinstance(st.target, ast.Name):
                    assigned.add(st.target.id)
        # a return value replaced: a pair swapped, anything else by None
        if isinstance(node, ast.Return) and node.value is not None and _one_line(node.value):
            v = node.value
            raw = blines[v.lineno - 1]
            if isinstance(v, ast.Tuple) and len(v.elts) == 2 and all(_one_line(e) for e in v.elts):
                a, b = (raw[e.col_offset:e.end_col_offset].decode() for e in v.elts)
                add(v, "return", v.lineno, v.elts[0].col_offset, v.elts[1].end_col_offset, f"{b}, {a}")
            elif not isinstance(v, (ast.Constant, ast.Tuple)):
                add(v, "return", v.lineno, v.col_offset, v.end_col_offset, "None")

    result, seen = [], defaultdict(int)
    for m in sorted(out.values(), key=lambda m: (m.lineno, m.op, m.new)):
        seen[m.key] += 1
        if seen[m.key] > 1:  # the same line, mutated the same way, twice in one file: number the copies
            m.key = hashlib.sha1(f"{m.key}\0{seen[m.key]}".encode()).hexdigest()[:10]
        mutated = lines[:]
        mutated[m.lineno - 1] = m.new
        try:
            ast.parse("".join(mutated))
        except SyntaxError:
            continue
        result.append(m)
    return result


def _find_token(g, tok):
    for i in range(len(g)):
        if g[i:i + len(tok)] == tok and g[i - 1:i] not in ("*", "/") and g[i + len(tok):i + len(tok) + 1] not in ("*", "/", "="):
            return i
    return None


def _call_name(call):
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _is_constructor(call):
    name = _call_name(call) if isinstance(call, ast.Call) else None
    return bool(name) and (name[0].isupper() or name in ("dict", "list", "tuple", "set", "partial", "replace", "field",
                                                         "range", "zip", "enumerate", "len", "str", "int", "float", "bool",
                                                         "zeros", "zeros_like", "empty", "empty_like", "isinstance"))


def _int_value(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def sample(n: int, seed: int) -> tuple[list[Mutant], dict[str, int]]:
    """A seeded sample of n mutants spread over the modules (proportional, at least MIN_PER_MODULE each)."""
    every = {p: mutants_of(p, (ROOT / p).read_text()) for p in MODULES}
    total = sum(len(v) for v in every.values())
    rng = random.Random(seed)
    chosen = []
    for p in MODULES:
        k = min(len(every[p]), max(MIN_PER_MODULE, round(n * len(every[p]) / total)))
        chosen += sorted(rng.sample(every[p], k), key=lambda m: m.lineno)
    return chosen, {p: len(v) for p, v in every.items()}


# ----------------------------------------------------------------------------------------------- tests

def public_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name) and not t.id.startswith("_") and t.id.isupper()}
    return names


def test_files_for(path: str) -> list[str]:
    """The test files that name one of the module's public names or the module itself."""
    dotted = path[:-3].replace("/", ".")
    names = public_names(ROOT / path)
    found = []
    for t in sorted((ROOT / "tests").glob("test_*.py")):
        if t.name in SKIP_TESTS:
            continue
        text = t.read_text()
        if dotted in text or any(re.search(rf"\b{re.escape(nm)}\b", text) for nm in names):
            found.append(f"tests/{t.name}")
    return found


def _fingerprint():
    h = hashlib.sha1()
    for p in sorted(list((ROOT / "rlbook").rglob("*.py")) + list((ROOT / "tests").glob("*.py")) + [ROOT / "pyproject.toml"]):
        h.update(str(p.relative_to(ROOT)).encode() + p.read_bytes())
    return h.hexdigest()[:12]


def _copy_repo(dest: Path):
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", "runs", "__pycache__", ".ipynb_checkpoints", ".hypothesis", "_build", "artifacts", ".venv*", "graded",
        "assignments-course", "checkpoints", "*.egg-info"))


def coverage_map(files: list[str]) -> dict:
    """Run the fast tests of these files once under coverage (one context per test) in a copy; returns
    {"lines": {path: {lineno: [test ids]}}, "seconds": {test id: s}, "failed": [...], "tests": {file: [ids]}}."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"coverage-{_fingerprint()}.json"
    if out.exists():
        return json.loads(out.read_text())
    work = Path(tempfile.mkdtemp(prefix="rlbook-mutmap-"))
    _copy_repo(work / "repo")
    t0 = time.time()
    print(f"coverage run of {len(files)} test files (once; cached in {out.relative_to(ROOT)}) ...", flush=True)
    code = subprocess.run(["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "--map-run",
                           str(work / "map.json"), *files], cwd=work / "repo", env=_child_env(work / "repo")).returncode
    if code != 0 or not (work / "map.json").exists():
        raise SystemExit(f"coverage run failed (exit {code})")
    data = json.loads((work / "map.json").read_text())
    shutil.rmtree(work, ignore_errors=True)
    print(f"coverage run: {len(data['seconds'])} tests in {time.time() - t0:.0f} s; "
          f"{len(data['failed'])} fail unmutated: {data['failed'][:5]}", flush=True)
    out.write_text(json.dumps(data))
    return data


def _child_env(repo: Path):
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1", TOKENIZERS_PARALLELISM="false", RLBOOK_MUTATION_RUN="1")
    return env


def _map_run(out: str, files: list[str]):
    """(in the copy) pytest over files with a coverage context per test."""
    import coverage
    import pytest

    repo = Path.cwd()
    sys.path.insert(0, str(repo))
    cov = coverage.Coverage(data_file=None, source=[str(repo / "rlbook")], branch=False)

    class Contexts:
        def __init__(self):
            self.seconds, self.failed, self.tests = {}, [], defaultdict(list)

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cov.switch_context(item.nodeid)
            t = time.perf_counter()
            yield
            self.seconds[item.nodeid] = round(time.perf_counter() - t, 3)
            self.tests[item.nodeid.split("::")[0]].append(item.nodeid)
            cov.switch_context("")

        def pytest_runtest_logreport(self, report):
            if report.failed and report.nodeid not in self.failed:
                self.failed.append(report.nodeid)

    plugin = Contexts()
    cov.start()
    pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not slow", "-W", "ignore::UserWarning", *files], plugins=[plugin])
    cov.stop()
    data = cov.get_data()
    lines = {}
    for fname in data.measured_files():
        rel = str(Path(fname).resolve().relative_to(repo))
        lines[rel] = {str(ln): sorted(c for c in ctx if c) for ln, ctx in data.contexts_by_lineno(fname).items()}
    Path(out).write_text(json.dumps(dict(lines=lines, seconds=plugin.seconds, failed=plugin.failed, tests=plugin.tests)))


def selection(m: Mutant, cmap: dict, files: list[str]) -> tuple[list[str], str]:
    """The test ids to run against a mutant (fastest first) and where they came from."""
    secs, bad = cmap["seconds"], set(cmap["failed"])
    if m.toplevel:
        ids = [i for f in files for i in cmap["tests"].get(f, [])]
        how = "files"
    else:
        per_line = cmap["lines"].get(m.path, {})
        ids = sorted({i for ln in m.stmt_lines for i in per_line.get(str(ln), [])})
        how = "coverage"
    ids = sorted((i for i in ids if i not in bad and i in secs), key=lambda i: (secs[i], i))
    return ids, how


# ----------------------------------------------------------------------------------------------- running

def _run_forked(ids: list[str], timeout: float) -> tuple[str, str]:
    """pytest -x over ids in a forked child (fresh rlbook import); ('caught'|'survived'|'timeout', first failure)."""
    import pytest

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.setpgid(0, 0)
        os.close(read)
        import io

        buf = io.StringIO()
        sys.stdout = sys.stderr = buf
        try:
            code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-W", "ignore::UserWarning", *ids])
        except BaseException as e:  # noqa: BLE001
            code, buf = 99, io.StringIO(f"FAILED {type(e).__name__}: {e}")
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", buf.getvalue(), re.M)
        os.write(write, json.dumps([int(code), failed[:1]]).encode())
        os._exit(0)
    os.close(write)
    os.set_blocking(read, False)
    data, deadline = b"", time.time() + timeout
    while True:
        try:
            chunk = os.read(read, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            data += chunk
            continue
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                data += os.read(read, 65536)
            except BlockingIOError:
                pass
            break
        if time.time() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            os.close(read)
            return "timeout", ""
        time.sleep(0.05)
    os.close(read)
    code, failed = json.loads(data or b'[99, []]')
    if code == 5:  # no tests collected: should not happen, count as survived
        return "survived", "(no tests collected)"
    return ("caught" if code else "survived"), (failed[0] if failed else (f"(exit {code})" if code else ""))


def _preimport(test_files: list[str]):
    """Import, once, every third-party module that rlbook and these test files import (found in a forked
    child), so that each mutant's child only imports rlbook and the tests."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        import importlib

        sys.path.insert(0, str(Path.cwd() / "tests"))
        for name in ["rlbook", *(p[:-3].replace("/", ".") for p in MODULES), *(Path(f).stem for f in test_files)]:
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001
                pass
        mine = ("rlbook", "test_", "conftest", "lm_helpers", "__main__", "tests")
        names = sorted(m for m in sys.modules if not m.startswith(mine))
        os.write(write, json.dumps(names).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 20):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    import importlib

    for name in json.loads(data or b"[]"):
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001
                pass
    for name in [m for m in sys.modules if m.startswith(("rlbook", "test_", "conftest", "lm_helpers"))]:
        del sys.modules[name]


def _worker(plan_file: str, shard: int, workers: int, out_file: str):
    """(in a copy) run every workers-th mutant of the plan, starting at shard; one JSON line each."""
    repo = Path.cwd()
    sys.path.insert(0, str(repo))
    sys.dont_write_bytecode = True
    import torch  # noqa: F401  (imported once, shared by the forked children)
    import transformers  # noqa: F401
    import pytest  # noqa: F401

    torch.set_num_threads(1)
    plan = json.loads(Path(plan_file).read_text())
    _preimport(sorted({i.split("::")[0] for item in plan for i in item["ids"]}))
    assert "rlbook" not in sys.modules
    with open(out_file, "a") as out:
        for item in plan[shard::workers]:
            m = item["mutant"]
            file = repo / m["path"]
            text = file.read_text()
            lines = text.splitlines(keepends=True)
            assert lines[m["lineno"] - 1] == m["old"], m
            lines[m["lineno"] - 1] = m["new"]
            file.write_text("".join(lines))
            t = time.time()
            try:
                status, by = _run_forked(item["ids"], item["timeout"])
            finally:
                file.write_text(text)
            row = dict(key=m["key"], status=status, by=by, seconds=round(time.time() - t, 1))
            out.write(json.dumps(row) + "\n")
            out.flush()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=DEFAULT_N)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--survivors", default=str(CACHE / "survivors.txt"))
    args = ap.parse_args(argv)

    chosen, counts = sample(args.n, args.seed)
    if args.only:
        every = [m for p in MODULES for m in mutants_of(p, (ROOT / p).read_text())]
        chosen = [m for m in every if m.key in set(args.only)]
    if args.list:
        for m in chosen:
            print(f"{m.label():60s} {m.old.strip()}\n{'':60s} {m.new.strip()}")
        print(f"\n{len(chosen)} mutants sampled of {sum(counts.values())} candidates")
        return 0
    files = {p: test_files_for(p) for p in MODULES}
    cmap = coverage_map(sorted({f for v in files.values() for f in v}))

    plan, rows = [], {}
    for m in chosen:
        if m.key in EQUIVALENT:
            rows[m.key] = dict(status="equivalent", by=EQUIVALENT[m.key], seconds=0)
            continue
        ids, how = selection(m, cmap, files[m.path])
        if not ids:
            rows[m.key] = dict(status="survived", by="(no fast test executes this line)", seconds=0)
            continue
        base = sum(cmap["seconds"][i] for i in ids)
        plan.append(dict(mutant=m.as_dict(), ids=ids, how=how, timeout=round(3 * base + TIMEOUT_SLACK, 1)))
    print(f"{len(chosen)} mutants ({sum(counts.values())} candidates in {len(MODULES)} modules, seed {args.seed}); "
          f"{len(plan)} to run with {args.workers} worker(s)", flush=True)

    work = Path(tempfile.mkdtemp(prefix="rlbook-mutants-"))
    (work / "plan.json").write_text(json.dumps(plan))
    t0 = time.time()
    procs = []
    for w in range(args.workers):
        repo = work / f"repo{w}"
        _copy_repo(repo)
        procs.append(subprocess.Popen(
            ["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "--worker", str(work / "plan.json"),
             str(w), str(args.workers), str(work / f"out{w}.jsonl")], cwd=repo, env=_child_env(repo)))
    seen: set[str] = set()
    while any(p.poll() is None for p in procs):
        time.sleep(5)
        done = [json.loads(ln) for w in range(args.workers) if (work / f"out{w}.jsonl").exists()
                for ln in (work / f"out{w}.jsonl").read_text().splitlines()]
        for r in done:
            if r["key"] not in seen:
                seen.add(r["key"])
                print(f"  {len(seen):4d}/{len(plan)} {r['key']} {r['status']:8s} {r['seconds']:6.1f}s {r['by']}", flush=True)
    for w in range(args.workers):
        f = work / f"out{w}.jsonl"
        for ln in (f.read_text().splitlines() if f.exists() else []):
            r = json.loads(ln)
            rows[r.pop("key")] = r
    wall = time.time() - t0
    shutil.rmtree(work, ignore_errors=True)
    return report(chosen, rows, wall, args)


def report(chosen, rows, wall, args):
    per = defaultdict(lambda: defaultdict(int))
    survivors = []
    for m in chosen:
        r = rows.get(m.key, dict(status="not run", by="", seconds=0))
        st = {"timeout": "caught"}.get(r["status"], r["status"])
        per[m.path][st] += 1
        if st in ("survived", "not run"):
            survivors.append((m, r))
    print(f"\n{'module':34s} {'mutants':>7s} {'equiv':>5s} {'caught':>6s} {'survived':>8s} {'share':>6s}")
    tot = defaultdict(int)
    for p in MODULES:
        c = per[p]
        n = sum(c.values())
        k = n - c["equivalent"]
        for s in ("caught", "survived", "equivalent", "not run"):
            tot[s] += c[s]
        print(f"{p:34s} {n:7d} {c['equivalent']:5d} {c['caught']:6d} {c['survived'] + c['not run']:8d} "
              f"{(c['caught'] / k if k else 1):6.1%}")
    k = sum(tot.values()) - tot["equivalent"]
    print(f"{'all':34s} {sum(tot.values()):7d} {tot['equivalent']:5d} {tot['caught']:6d} "
          f"{tot['survived'] + tot['not run']:8d} {tot['caught'] / max(k, 1):6.1%}")
    print(f"\n{tot['caught']} of {k} non-equivalent mutants caught ({tot['caught'] / max(k, 1):.1%}); "
          f"{tot['equivalent']} equivalent left out; wall time {wall / 60:.1f} min with {args.workers} worker(s)")
    path = Path(args.survivors)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for m, r in survivors:
            f.write(f"{m.label()}  {r['by']}\n  - {m.old.strip()}\n  + {m.new.strip()}\n\n")
    print(f"{len(survivors)} survivors written to {path}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--map-run"]:
        _map_run(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main(sys.argv[1:]))
