"""pytest plugin for running FlashAttention's test files against flashjit (load with -p fa_compat_plugin).

Environment:
  FA_COMPAT_STRIDE=N     keep every Nth parametrized case of each test function (default 1)
  FA_COMPAT_OFFSET=K     ... starting at case K (default 0), so runs with K = 0..N-1 cover all
  FA_COMPAT_PER_FUNC=M   then keep at most M cases per function, evenly spaced (default: no cap);
                         "M test_a=M2 ..." gives named functions their own cap
  FA_COMPAT_BUDGET_S=S   after S seconds of running, skip the cases not yet started (reason
                         "fa_compat: time budget spent"); cases run round-robin across the test
                         functions, so a cut run still samples each of them (default: no budget)
  FA_COMPAT_SUMMARY=P    write the tally to P (markdown) and P.json (default: none)
  FA_COMPAT_FAKE_CAPABILITY=9.0  on a machine without CUDA only, answer torch.cuda's capability
                         queries with this, so FlashAttention's module-level checks import and
                         --collect-only works; running tests is refused in that mode
  FA_COMPAT_MODE=M       the runner's MODE (forward, train, asis), written at the top of the tally

The tally sorts each case into: passed; skipped (by the test itself, or for the time budget);
unsupported: a NotImplementedError (a feature flashjit or this shim does not have, named in the
message), or flashjit's backward refusing the call's semantics by name (FlashjitError
"unsupported: no backward kernel family serves ...: bwd_sm80 refused: window: ...", or the engine's
"unsupported: deterministic: ..."), listed by the feature, not the variant; failed in backward
(a library without a backward pass: "no backward pass"); other failures (wrong numbers, other
flashjit errors, anything else), each with the first line of its reason.
"""
import json
import os
import re
import time
from collections import OrderedDict, defaultdict

import pytest

_BUDGET_REASON = "fa_compat: time budget spent"
_state = {"start": None, "collected": OrderedDict(), "selected": OrderedDict(), "results": OrderedDict(),
          "fake_capability": None, "pruned": set()}


def _env_int(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def pytest_configure(config):
    fake = os.environ.get("FA_COMPAT_FAKE_CAPABILITY", "").strip()
    if fake:
        import torch
        if torch.cuda.is_available():
            return  # a real GPU answers for itself
        major, minor = (int(x) for x in fake.split("."))
        torch.cuda.get_device_capability = lambda device=None: (major, minor)
        _state["fake_capability"] = (major, minor)


def _function(item):
    return getattr(item, "originalname", None) or item.name.split("[")[0]


def _per_func(name):
    """FA_COMPAT_PER_FUNC: "M" or "M test_x=M2 ...": the cap, with overrides by function."""
    cap = 0
    for word in os.environ.get("FA_COMPAT_PER_FUNC", "").split():
        key, _, value = word.rpartition("=")
        if not key:
            cap = int(value)
        elif key == name:
            return int(value)
    return cap


def _subsample(cases, name):
    stride = max(1, _env_int("FA_COMPAT_STRIDE", 1))
    offset = _env_int("FA_COMPAT_OFFSET", 0) % stride
    per_func = _per_func(name)
    kept = cases[offset::stride]
    if per_func and len(kept) > per_func:
        kept = [kept[(i * len(kept)) // per_func] for i in range(per_func)]
    return kept


@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc):
    """Subsamples each function's parametrized cases as they are generated: FA2's file holds about
    half a million, and making a test item of each takes minutes."""
    result = yield
    calls = getattr(metafunc, "_calls", None)
    name = metafunc.function.__name__
    if isinstance(calls, list) and calls:
        _state["collected"][name] = _state["collected"].get(name, 0) + len(calls)
        metafunc._calls = _subsample(calls, name)
        _state["pruned"].add(name)
    return result


def pytest_collection_modifyitems(session, config, items):
    groups = OrderedDict()
    for item in items:
        groups.setdefault(_function(item), []).append(item)
    kept_groups = OrderedDict()
    for name, group in groups.items():
        if name in _state["pruned"]:
            kept = group  # subsampled while generated
        else:
            _state["collected"][name] = len(group)
            kept = _subsample(group, name)
        _state["selected"][name] = len(kept)
        kept_groups[name] = kept
    # Round-robin across functions, so a time budget cut leaves a sample of each.
    order, queues = [], [list(g) for g in kept_groups.values()]
    while any(queues):
        for q in queues:
            if q:
                order.append(q.pop(0))
    if len(order) != len(items):
        keep = set(map(id, order))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in keep])
    items[:] = order


def pytest_collection_finish(session):
    if _state["fake_capability"] and not session.config.option.collectonly:
        pytest.exit("FA_COMPAT_FAKE_CAPABILITY is for --collect-only on a machine without CUDA", returncode=4)


def pytest_runtest_setup(item):
    budget = _env_int("FA_COMPAT_BUDGET_S", 0)
    now = time.monotonic()
    if _state["start"] is None:
        _state["start"] = now
    if budget and now - _state["start"] > budget:
        pytest.skip(_BUDGET_REASON)


def _reason(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:200] if text.strip() else "(no message)"


# flashjit's backward refusing semantics it lacks: the family's refusal after the variant's name
# (which holds the head dim and dtype, so would split one feature into many rows), or the engine's
# own refusal of a backward mode.
_BACKWARD_REFUSAL = re.compile(r"FlashjitError: unsupported: (?:no backward kernel family serves \S+ on \S+: "
                               r"(?:\S+ refused: )?|(?=deterministic: ))(.*)")


def _classify(report):
    text = str(report.longrepr)
    reason = _reason(report)
    if "no backward pass" in text:
        return "failed_backward", reason
    if reason.startswith("NotImplementedError"):
        # Numbers in a message (a chunk size, a seqlen) would split one feature into many rows.
        return "unsupported", re.sub(r"=\d+", "=N", reason)
    refusal = _BACKWARD_REFUSAL.search(reason)
    if refusal:
        return "unsupported", "FlashjitError (backward): " + refusal.group(1)
    return "failed_other", reason


def pytest_runtest_logreport(report):
    rec = _state["results"].setdefault(report.nodeid, {"function": report.nodeid.split("::")[-1].split("[")[0],
                                                       "outcome": None, "reason": ""})
    if report.when == "call" or (report.when == "setup" and not report.passed) or (
            report.when == "teardown" and report.failed and rec["outcome"] in (None, "passed")):
        if report.passed:
            rec["outcome"] = "passed"
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else _reason(report)
            rec["outcome"] = "skipped_budget" if _BUDGET_REASON in reason else "skipped"
            rec["reason"] = reason.replace("Skipped: ", "")
        else:
            rec["outcome"], rec["reason"] = _classify(report)


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")
_COLUMNS = ("passed", "failed_other", "unsupported", "failed_backward", "skipped", "skipped_budget")


def _tally():
    per = OrderedDict()
    reasons = defaultdict(dict)
    for rec in _state["results"].values():
        row = per.setdefault(rec["function"], {c: 0 for c in _COLUMNS})
        outcome = rec["outcome"] or "skipped_budget"  # started, never finished (interrupted)
        row[outcome] = row.get(outcome, 0) + 1
        if rec["outcome"] in ("failed_other", "unsupported", "failed_backward", "skipped"):
            # One row per kind of failure: the numbers in an assertion (max diffs) vary per case.
            key = (rec["function"], _NUMBER.sub("#", rec["reason"]))
            entry = reasons[rec["outcome"]].setdefault(key, [0, rec["reason"]])
            entry[0] += 1
    return per, reasons


def _markdown(per, reasons, elapsed):
    lines = ["| test function | collected | selected | passed | failed (other) | unsupported (NotImplementedError "
             "or backward refusal) | failed in backward | skipped | not run (budget or interrupt) |",
             "|---|---|---|---|---|---|---|---|---|"]
    total = defaultdict(int)
    names = list(_state["selected"]) or list(per)
    for name in names:
        row = dict(per.get(name, {c: 0 for c in _COLUMNS}))
        if elapsed is not None:  # cases never reported (an interrupted run) count as not run
            row["skipped_budget"] += max(0, _state["selected"].get(name, 0) - sum(row.values()))
        cells = [_state["collected"].get(name, 0), _state["selected"].get(name, 0)] + [row[c] for c in _COLUMNS]
        for key, value in zip(("collected", "selected") + _COLUMNS, cells):
            total[key] += value
        lines.append("| %s | %s |" % (name, " | ".join(str(c) for c in cells)))
    lines.append("| **total** | %s |" % " | ".join(str(total[k]) for k in ("collected", "selected") + _COLUMNS))
    if elapsed is not None:
        lines.append("\nran for %.0f s" % elapsed)
    titles = {"failed_other": "Other failures",
              "unsupported": "Unsupported features (NotImplementedError, or the backward's FlashjitError by name)",
              "failed_backward": "Failed in backward", "skipped": "Skipped by the test"}
    for key in ("failed_other", "unsupported", "failed_backward", "skipped"):
        if not reasons.get(key):
            continue
        lines.append("\n### %s (count, function, first line of one case)" % titles[key])
        for (function, _), (count, example) in sorted(reasons[key].items(), key=lambda kv: -kv[1][0]):
            lines.append("- %d x %s: `%s`" % (count, function, example.replace("`", "'")))
    return "\n".join(lines) + "\n"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    per, reasons = _tally()
    elapsed = time.monotonic() - _state["start"] if _state["start"] is not None else None
    text = _markdown(per, reasons, elapsed)
    mode = os.environ.get("FA_COMPAT_MODE", "").strip()
    if mode:
        text = "mode: %s\n\n" % mode + text
    if _state["fake_capability"]:
        text = "(collect-only, CUDA capability answered as %d.%d)\n\n" % _state["fake_capability"] + text
    terminalreporter.write_sep("=", "fa_compat tally")
    terminalreporter.write_line(text)
    path = os.environ.get("FA_COMPAT_SUMMARY", "").strip()
    if path:
        with open(path, "w") as f:
            f.write(text)
        with open(path + ".json", "w") as f:
            json.dump({"collected": _state["collected"], "selected": _state["selected"], "per_function": per,
                       "results": _state["results"], "elapsed_s": elapsed}, f, indent=1)
