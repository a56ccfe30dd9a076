"""tbdkit: a containerized reproducibility kit for TBD, the Training Benchmark for DNNs.

The code lives in packages of a rank (docs/architecture.md): core, env, spec, results, analysis, adapters,
agent, describe, launch, calibrate, bench, report, artifact, cli.
"""

__version__ = "0.1.0"
