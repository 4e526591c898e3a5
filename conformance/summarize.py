#!/usr/bin/env python3
"""Summarise the JUnit reports of a conformance run (scripts/conformance.sh) in Markdown.

Only [Conformance] specs are counted (every spec with --all, for runs of other labels); a spec that appears in several reports (the parallel pass
skips what the serial pass runs, and the other way round) takes its most telling state:
failed over passed over skipped. Prints the totals, a table by area (the suite's [sig-…]
names) and each failed spec with the first line of its failure.

usage: summarize.py [--all] [--wall SECONDS] [--commit SHA] JUNIT.xml...
"""
import argparse
import datetime
import re
import sys
import xml.etree.ElementTree as ET

RANK = {"skipped": 0, "passed": 1, "failed": 2}


def state_of(case):
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    status = case.get("status", "passed")
    return {"pending": "skipped", "timedout": "failed", "panicked": "failed",
            "interrupted": "failed", "aborted": "failed"}.get(status, status)


def first_line(case):
    for tag in ("failure", "error"):
        el = case.find(tag)
        if el is not None:
            text = (el.get("message") or el.text or "").strip()
            for line in text.splitlines():
                line = line.strip()
                if line:
                    return line[:300]
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wall", type=int)
    ap.add_argument("--commit")
    ap.add_argument("--all", action="store_true", help="count every spec, not only [Conformance] ones")
    ap.add_argument("reports", nargs="+")
    args = ap.parse_args()

    specs = {}
    for path in args.reports:
        try:
            tree = ET.parse(path)
        except (ET.ParseError, OSError) as err:
            print(f"summarize: {path}: {err}", file=sys.stderr)
            continue
        for case in tree.iter("testcase"):
            name = case.get("name", "")
            if args.all:
                # Every spec, not the suite's set-up and tear-down nodes.
                if not name.startswith("[It]"):
                    continue
            elif "[Conformance]" not in name:
                continue
            name = re.sub(r"^\[It\]\s*", "", name)
            state = state_of(case)
            old = specs.get(name)
            if old is None or RANK[state] > RANK[old[0]]:
                specs[name] = (state, first_line(case))

    areas = {}
    for name, (state, _) in specs.items():
        m = re.match(r"\[(sig-[a-z-]+)\]", name)
        area = m.group(1) if m else "other"
        counts = areas.setdefault(area, {"passed": 0, "failed": 0, "skipped": 0})
        counts[state] += 1

    total = {k: sum(a[k] for a in areas.values()) for k in ("passed", "failed", "skipped")}
    out = []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out.append(f"Run: {now}" + (f", commit {args.commit}" if args.commit else "")
               + (f", wall time {args.wall // 60} min {args.wall % 60} s" if args.wall else ""))
    out.append("")
    out.append(f"passed {total['passed']}, failed {total['failed']}, skipped {total['skipped']} "
               f"of {len(specs)} {'' if args.all else '[Conformance] '}specs")
    out.append("")
    out.append("| area | passed | failed | skipped |")
    out.append("|---|---:|---:|---:|")
    for area in sorted(areas):
        a = areas[area]
        out.append(f"| {area} | {a['passed']} | {a['failed']} | {a['skipped']} |")
    failed = sorted(n for n, (s, _) in specs.items() if s == "failed")
    if failed:
        out.append("")
        out.append("## Failed")
        out.append("")
        for name in failed:
            out.append(f"- {name}")
            why = specs[name][1]
            if why:
                out.append(f"  - {why}")
    out.append("")
    out.append("## Every spec")
    out.append("")
    for name in sorted(specs):
        out.append(f"- {specs[name][0]}: {name}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
