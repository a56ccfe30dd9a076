"""The paper's analyses as arithmetic on measured inputs: peak FLOP/s and MFU, the memory
breakdown, the kernel timeline and Nsight Compute counters. No framework imports here: the
adapters measure, these modules compute and write, and the tests check them on fixtures."""
