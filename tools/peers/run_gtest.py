#!/usr/bin/env python3
"""Runs a GoogleTest binary for scripts/device-check.sh and reports per test from gtest's JSON, also when
the binary crashes: a first run of everything in one process (--gtest_output=json); if it ends without
its JSON, the test that was running (the last `[ RUN      ]` without its end line) is recorded as crashed,
and the tests that had not run yet are run again one suite per process; in a suite's process that crashes
too, its remaining tests one per process. Only the standard library: this interpreter needs none of the
binary's libraries, which go to the test processes alone (--lib-path, put in front of their
LD_LIBRARY_PATH; never this process's own).

  run_gtest.py BINARY --work DIR --summary FILE [--lib-path P] [--env K=V ...] [--expect-gpu] [--timeout S]

A test still running when its process's time is up (60% of --timeout for the first process) is "hung" and
handled as a crash. Writes FILE: {"status", "tests", "passed", "failed": [names], "crashed": [names],
"hung": [names], "skipped", "skipped_names",
"not_run": [names], "no_device_skips", "processes", "message"}. Exit status 0 = status "ok" (no failure,
no crash, and with --expect-gpu no test skipped for want of a device: "no CUDA device present"), 1 otherwise,
124 when --timeout ran out (what ran by then is in FILE).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import OrderedDict

NO_DEVICE = "no CUDA device present"
END = re.compile(r"^\[ +(OK|FAILED|SKIPPED) +\] (\S+\.\S+)")
RUN = re.compile(r"^\[ RUN      \] (\S+)")


def list_tests(binary, env, filter_=""):
    cmd = [binary, "--gtest_list_tests"] + ([f"--gtest_filter={filter_}"] if filter_ else [])
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"--gtest_list_tests exited {out.returncode}: {(out.stdout + out.stderr)[-500:]}")
    tests, suite = [], None
    for line in out.stdout.splitlines():
        if not line.strip() or line.startswith("Running main()"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            tests.append(suite + line.split("#")[0].strip())
    return tests


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--work", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--lib-path", default="")
    ap.add_argument("--env", action="append", default=[], help="K=V for the test processes")
    ap.add_argument("--expect-gpu", action="store_true")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--filter", default="", help="a gtest filter: only these tests (default: all)")
    args = ap.parse_args()
    deadline = time.time() + args.timeout
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ)
    if args.lib_path:
        env["LD_LIBRARY_PATH"] = args.lib_path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v

    results = OrderedDict()  # name -> "passed" | "failed" | "skipped" | "crashed"
    summary = {"status": "failed", "processes": 0, "no_device_skips": 0, "message": ""}
    log_all = open(os.path.join(args.work, "gtest.log"), "w")
    timed_out = False

    def run(filter_, tag, limit=None):
        """One process, at most `limit` seconds (and never past the deadline); returns (exit code or
        'timeout', the test that crashed or hung, or None). A hung test is recorded as such and the caller
        goes on without it; only the deadline ends the whole run."""
        nonlocal timed_out
        left = deadline - time.time()
        if left < 2:
            timed_out = True
            return "timeout", None
        mine = min(left, limit) if limit else left
        js = os.path.join(args.work, f"gtest-{tag}.json")
        if os.path.exists(js):
            os.remove(js)
        cmd = [args.binary, f"--gtest_output=json:{js}"] + ([f"--gtest_filter={filter_}"] if filter_ else [])
        summary["processes"] += 1
        log_all.write(f"\n==== {' '.join(cmd)}\n")
        log_all.flush()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               env=env, timeout=mine)
            rc, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            if time.time() >= deadline - 1:
                timed_out = True
        log_all.write(out)
        log_all.write(f"\n==== exit {rc}\n")
        log_all.flush()
        summary["no_device_skips"] += out.count(NO_DEVICE)
        running = None  # the log first (a crash leaves no JSON), then the JSON over it where there is one
        for line in out.splitlines():
            m = RUN.match(line)
            if m:
                running = m.group(1)
                continue
            m = END.match(line)
            if m:
                name = m.group(2)
                results[name] = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}[m.group(1)]
                if name == running:
                    running = None
        if os.path.exists(js):
            try:
                d = json.load(open(js))
                for s in d.get("testsuites", []):
                    for t in s.get("testsuite", []):
                        name = f"{s['name']}.{t['name']}"
                        if t.get("failures"):
                            results[name] = "failed"
                        elif t.get("result") == "SKIPPED":
                            results[name] = "skipped"
                        elif t.get("status") == "RUN":
                            results[name] = "passed"
                return rc, None
            except (ValueError, KeyError):
                pass  # a truncated JSON: the log's reading stands
        if running:
            results[running] = "hung" if rc == "timeout" else "crashed"
        return rc, running

    try:
        all_tests = list_tests(args.binary, env, args.filter)
    except Exception as e:  # noqa: BLE001
        summary["message"] = f"could not list the tests: {e}"
        json.dump(summary, open(args.summary, "w"), indent=1)
        return 1
    summary["tests"] = len(all_tests)
    rc, crashed = run(args.filter, "all", 0.6 * args.timeout)  # a hang leaves 40% for the tests after it
    reruns = 0
    if crashed or (rc not in (0, 1) and len(results) < len(all_tests) and not timed_out):
        # the remaining tests, one suite per process; a crashing suite's rest one test per process
        suites = OrderedDict()
        for t in all_tests:
            if t not in results:
                suites.setdefault(t.rsplit(".", 1)[0], []).append(t)
        for suite, tests in suites.items():
            if timed_out:
                break
            reruns += 1
            rc2, crashed2 = run(":".join(tests), f"suite{reruns}", max(20.0, 0.2 * args.timeout))
            if crashed2:
                bad_in_a_row = 0
                for t in tests:
                    if t not in results and not timed_out and bad_in_a_row < 3:  # 3 in a row: the rest would too
                        reruns += 1
                        _, c = run(t, f"test{reruns}", 15.0)
                        bad_in_a_row = bad_in_a_row + 1 if c else 0
    log_all.close()
    counts = {k: [n for n, r in results.items() if r == k] for k in ("passed", "failed", "skipped", "crashed", "hung")}
    not_run = [t for t in all_tests if t not in results]
    summary.update(passed=len(counts["passed"]), failed=counts["failed"], crashed=counts["crashed"], hung=counts["hung"],
                   skipped=len(counts["skipped"]), skipped_names=counts["skipped"], not_run=not_run,
                   first_process_exit=rc)
    why = []
    if counts["failed"]:
        why.append(f"{len(counts['failed'])} failed")
    if counts["crashed"]:
        why.append(f"{len(counts['crashed'])} crashed ({', '.join(counts['crashed'][:3])})")
    if counts["hung"]:
        why.append(f"{len(counts['hung'])} hung ({', '.join(counts['hung'][:3])})")
    if args.expect_gpu and summary["no_device_skips"]:
        why.append(f"{summary['no_device_skips']} tests skipped with '{NO_DEVICE}' though nvidia-smi lists a GPU")
    if args.expect_gpu and not counts["passed"]:
        why.append("no test passed")
    if not_run:
        why.append(f"{len(not_run)} not run" + (" (time ran out)" if timed_out else ""))
    summary["status"] = "timeout" if timed_out else ("failed" if why else "ok")
    summary["message"] = (f"{len(all_tests)} tests: passed {len(counts['passed'])}, failed {len(counts['failed'])}, "
                          f"crashed {len(counts['crashed'])}, hung {len(counts['hung'])}, skipped {len(counts['skipped'])}"
                          + (f", not run {len(not_run)}" if not_run else "") + (f"; {'; '.join(why)}" if why else "")
                          + (f"; {summary['processes']} processes" if summary["processes"] > 1 else ""))
    json.dump(summary, open(args.summary, "w"), indent=1)
    print(summary["message"])
    return 124 if timed_out else (0 if summary["status"] == "ok" else 1)


if __name__ == "__main__":
    sys.exit(main())
