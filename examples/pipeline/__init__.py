"""An example pipeline: JSON events, per-minute aggregates with Spark, exactly once to Parquet.

- :mod:`examples.pipeline.events`: the sample events and a producer for them.
- :mod:`examples.pipeline.aggregates`: the micro-batch function and the read-side roll-up.
- ``pipeline.yaml``: the configuration template ``examples/run_pipeline.py`` fills in.
"""
