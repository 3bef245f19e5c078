"""Looking into a running process from inside it: thread dumps, sampling profiles, memory.

Served on the metrics endpoint under ``/debug/`` when a channel's configuration has
``metrics.debug: true``, and fetched by ``jetkafka debug threads|profile|memory``; see
docs/operations.md, "Profiling a running process". Nothing here runs until it is asked for.

- :mod:`jetkafka.profiling._cpu_clock`: the CPU time of one thread, from Linux's per-thread clock.
- :mod:`jetkafka.profiling._sampler`: the sampling profiler of every thread (cpu or wall mode).
- :mod:`jetkafka.profiling._formats`: a profile as speedscope JSON or collapsed stacks.
- :mod:`jetkafka.profiling._threads`: the thread dump.
- :mod:`jetkafka.profiling._memory`: the tracemalloc report.
- :mod:`jetkafka.profiling._routes`: the ``/debug/`` paths of the metrics endpoint.
- :mod:`jetkafka.profiling._commands`: the ``jetkafka debug`` command.

The modules are internal; this package exports nothing.
"""

from __future__ import annotations

__all__: list[str] = []
