"""What the workloads share: the data checks, the errors, the family training steps and the
sibling loader. workloads/README.md states the contract; tbdkit/spec/catalog.py puts workloads/ on the
import path, so a workload file imports this as `from _shared import ...`."""
