"""The machine and its software: machine facts, CPUs, NVML access, Nsight tools, locks, installer, stacks, images."""
