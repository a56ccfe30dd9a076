"""WGAN-GP on PyTorch: gan_64x64.py's 14+14-layer ResNet pair, the gradient penalty, a smoke
iteration whose critic learns, every math mode."""


import pytest
import torch
from torch import nn

from tbdkit.adapters.pytorch import Precision
from model_checks import learned, modules, parameters

MODEL, WORKLOAD, DATA = modules("wgan_gp")


def expected_parameters(hp):
    """Generator and critic parameter counts from the hyperparameters alone, layer by layer."""
    d, z = hp["dim"], hp["noise_dim"]

    def block(cin, cout, up):
        mid = cout if up else cin
        norms = 2 * cin + 2 * mid                        # two norms, scale + offset per channel
        conv1 = 9 * cin * mid                            # no bias: a norm follows
        conv2 = 9 * mid * cout + cout
        return norms + conv1 + conv2 + cin * cout + cout  # + the 1x1 shortcut with bias

    gen = z * 16 * 8 * d + 16 * 8 * d
    gen += sum(block(a, b, True) for a, b in [(8 * d, 8 * d), (8 * d, 4 * d), (4 * d, 2 * d), (2 * d, d)])
    gen += 2 * d + 9 * d * 3 + 3
    critic = 9 * 3 * d + d
    critic += sum(block(a, b, False) for a, b in [(d, 2 * d), (2 * d, 4 * d), (4 * d, 8 * d), (8 * d, 8 * d)])
    critic += 16 * 8 * d + 1
    return gen, critic


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    pair = WORKLOAD.Pair(hp)
    assert (parameters(pair.generator), parameters(pair.critic)) == expected_parameters(hp)


def test_paper_network_size_and_depth():
    pair = WORKLOAD.Pair(MODEL.hp("paper"))
    assert (parameters(pair.generator), parameters(pair.critic)) == (8_540_483, 7_491_841)
    for net in (pair.generator, pair.critic):  # "14+14 layers, 4 residual blocks each" (TBD Table I)
        assert sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in net.modules()) == 14
        assert sum(isinstance(m, WORKLOAD.ResidualBlock) for m in net.modules()) == 4
    assert all(isinstance(m, nn.GroupNorm) and m.num_groups == 1
               for m in pair.critic.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)))


def test_shapes():
    hp = MODEL.hp("smoke")
    pair = WORKLOAD.Pair(hp).eval()
    with torch.no_grad():
        images = pair.generator(torch.randn(3, hp["noise_dim"]))
        assert images.shape == (3, 3, 64, 64) and images.abs().max() <= 1
        assert pair.critic(images).shape == (3,)


def test_gradient_penalty_of_a_linear_critic():
    # D(x) = <w, x> has gradient w everywhere: the penalty is (||w|| - 1)^2.
    w = torch.full((3, 8, 8), 0.1)
    critic = lambda x: (x * w).flatten(1).sum(1)  # noqa: E731
    gp = WORKLOAD.gradient_penalty(critic, torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 8),
                                   Precision("fp32", torch.device("cpu")))
    assert float(gp) == pytest.approx((float(w.norm()) - 1) ** 2, rel=1e-5)


def test_smoke_iterations_train_the_critic_per_slice_and_the_generator_once():
    hp = MODEL.hp("smoke")
    batch = next(DATA.batches("synthetic", hp, 2, seed=0))
    assert batch.samples == hp["critic_iters"] * 2 == batch.work
    training = learned("wgan_gp", "pytorch").trained  # LEARNING's row: 2 steps of a batch of 2, the loss falls
    steps = lambda opt: {int(s["step"]) for s in opt.state.values()}  # noqa: E731
    assert steps(training.c_optimizer) == {2 * hp["critic_iters"]} and steps(training.g_optimizer) == {2}
    assert all(p.requires_grad for p in training.model.parameters())
