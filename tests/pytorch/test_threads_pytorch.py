"""One core's budget sets pytorch's intra-op and inter-op threads, as env.json records them (tbdkit.env.cpus)."""

from thread_checks import check_one_core


def test_one_core_budget_sets_pytorch_threads():
    check_one_core("pytorch")
