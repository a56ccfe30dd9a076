"""MXNet's data-parallel half: the installed build has the distributed kvstore (ps-lite) that
dist_sync needs, and a build without it is refused in one sentence before any process waits."""

from __future__ import annotations

import collections

import mxnet as mx
import pytest

from tbdkit.adapters.mxnet import NO_DIST_KVSTORE, require_dist_kvstore


class Build(collections.OrderedDict):
    """A build's feature table read by MXNet's own Features.is_enabled."""

    is_enabled = mx.runtime.Features.is_enabled


def test_the_pypi_wheel_has_the_distributed_kvstore():
    assert mx.runtime.Features().is_enabled("DIST_KVSTORE")
    require_dist_kvstore(mx.runtime.Features())


def test_a_build_without_it_is_refused_in_one_sentence():
    lacking = Build(mx.runtime.Features())
    lacking["DIST_KVSTORE"] = mx.runtime.Feature(b"DIST_KVSTORE", False)
    with pytest.raises(RuntimeError) as exc:
        require_dist_kvstore(lacking)
    assert str(exc.value) == NO_DIST_KVSTORE and str(exc.value).count(". ") == 0
    assert "DIST_KVSTORE" in NO_DIST_KVSTORE and "NGC" in NO_DIST_KVSTORE
