#!/usr/bin/env python3
"""Fails when a test's doctest::Approx(...) has no .scale(...): doctest's default scale 1 also
accepts any absolute difference under epsilon (1.2e-5 by default), which makes checks of small
values (microsecond times, tiny byte counts) pass whatever they are. Usage: approx_is_relative.py
FILE..."""
import re
import sys


def closing(text, start):
    """Index after the parenthesis that closes the one opened just before `start`."""
    depth = 1
    while depth:
        depth += {"(": 1, ")": -1}.get(text[start], 0)
        start += 1
    return start


def unscaled(text):
    """Line numbers of Approx(...) chains without .scale(...)."""
    lines = []
    for match in re.finditer(r"doctest::Approx\(", text):
        end = closing(text, match.end())
        chain = ""
        while (link := re.match(r"\s*\.(epsilon|scale)\(", text[end:])):
            chain += link.group(1)
            end = closing(text, end + link.end())
        if "scale" not in chain:
            lines.append(text.count("\n", 0, match.start()) + 1)
    return lines


failures = [f"{path}:{line}" for path in sys.argv[1:] for line in unscaled(open(path).read())]
for failure in failures:
    print(f"{failure}: doctest::Approx without .scale(0) (absolute tolerance 1.2e-5)")
sys.exit(1 if failures else 0)
