"""A :class:`~jetkafka.profiling._sampler.Profile` written in the formats flame-graph tools read.

- :func:`speedscope`: speedscope's file format (https://www.speedscope.app/file-format-schema.json),
  one ``sampled`` profile per thread, heaviest first, over one shared frame table (``name``,
  ``file``, ``line``); weights in seconds (CPU seconds in cpu mode, wall seconds in wall mode).
  Open it at https://www.speedscope.app or with the ``speedscope`` command.
- :func:`collapsed`: Brendan Gregg's collapsed stacks, one ``thread;root;...;leaf COUNT`` line
  per distinct stack, for ``flamegraph.pl``, inferno or speedscope. COUNT is the stack's weight in
  whole microseconds (of CPU, or of wall time), so ``flamegraph.pl --countname us`` labels it.

A frame is written ``function (file:line)``, the file shortened to its path under the
``sys.path`` entry it was imported from (``jetkafka/channel/_fetcher.py``), the line the one the
function starts at: a flame graph then merges a function's samples whatever line it was on.

Guarantee: both are pure functions of the profile; nothing is read from the process again.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from typing import Any

from jetkafka.profiling._sampler import Frame, Profile

__all__ = ["SPEEDSCOPE_SCHEMA", "collapsed", "describe", "frame_label", "speedscope", "speedscope_bytes"]

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def describe(profile: Profile) -> str:
    """One line: what was sampled, how, and how much was found."""
    return (
        f"{profile.mode} profile of pid {os.getpid()}: {profile.seconds:.1f} s at {profile.hz:g} Hz, "
        f"{profile.samples} samples of {len(profile.threads)} threads"
        + (" (cancelled early)" if profile.cancelled else "")
    )


def _short_file(path: str) -> str:
    for entry in sorted((p for p in sys.path if p), key=len, reverse=True):
        prefix = entry.rstrip(os.sep) + os.sep
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def frame_label(frame: Frame) -> str:
    """``function (file:line)``, without the ``;`` that separates frames in collapsed stacks."""
    return f"{frame.name} ({_short_file(frame.file)}:{frame.line})".replace(";", ":")


def speedscope(profile: Profile) -> dict[str, Any]:
    """The profile as a speedscope document (a dict ready for :func:`json.dumps`)."""
    profiles = []
    for thread in profile.threads:
        total = thread.seconds
        native = f", tid {thread.native_id}" if thread.native_id is not None else ""
        profiles.append(
            {
                "type": "sampled",
                "name": f"{thread.name} ({total:.3f} s {profile.mode}, {thread.samples} samples{native})",
                "unit": "seconds",
                "startValue": 0,
                "endValue": total,
                "samples": [list(stack) for stack in thread.stacks],
                "weights": thread.weights,
            }
        )
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": describe(profile),
        "exporter": "jetkafka",
        "activeProfileIndex": 0,
        "shared": {
            "frames": [
                {"name": frame.name, "file": _short_file(frame.file), "line": frame.line} for frame in profile.frames
            ]
        },
        "profiles": profiles,
    }


def speedscope_bytes(profile: Profile) -> bytes:
    """:func:`speedscope` as compact UTF-8 JSON (a long profile has many samples)."""
    return json.dumps(speedscope(profile), separators=(",", ":")).encode()


def collapsed(profile: Profile) -> str:
    """The profile as collapsed stacks, heaviest first; stacks under a microsecond are left out."""
    labels = [frame_label(frame) for frame in profile.frames]
    lines: list[tuple[int, str]] = []
    for thread in profile.threads:
        weights: dict[tuple[int, ...], float] = defaultdict(float)
        for stack, weight in zip(thread.stacks, thread.weights, strict=True):
            weights[stack] += weight
        root = thread.name.replace(";", ":")
        for stack, weight in weights.items():
            count = round(weight * 1e6)
            if count > 0:
                lines.append((count, ";".join([root, *(labels[i] for i in stack)])))
    lines.sort(key=lambda line: (-line[0], line[1]))
    return "".join(f"{text} {count}\n" for count, text in lines)
