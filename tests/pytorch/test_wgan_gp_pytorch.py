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
    training = learned("wgan_gp", "pytorch").trained  # [checks.learning]: 2 steps of a batch of 2, the loss falls
    steps = lambda opt: {int(s["step"]) for s in opt.state.values()}  # noqa: E731
    assert steps(training.c_optimizer) == {2 * hp["critic_iters"]} and steps(training.g_optimizer) == {2}
    assert all(p.requires_grad for p in training.model.parameters())


def test_flops_of_a_critic_iteration_with_one_discriminator_layer_by_hand():
    """The critic's first layer (3 -> dim channels, 3x3, padding 1, on 64x64 images) as the whole
    critic (score = the sum of its outputs), a one-layer generator (noise_dim -> 3x64x64), N images:
    critic_step as the workload runs it, gradient penalty included. The layer's forward is
    F = 2 x 64 x 64 x dim x 3 x 9 FLOPs an image. What autograd runs, in units of N x F:
    3 forwards (fake, real, the interpolates); the penalty's gradient of the score with respect to the
    interpolates (an input gradient, 1); the loss's backward: the weight gradients of the fake and real
    passes (2), and the double backward of the penalty's gradient: its weight gradient (1) and the
    gradient with respect to the first backward's incoming gradient (1: PyTorch's
    _convolution_double_backward computes ggO = conv(ggI, w) whenever ggI is defined, needed or not).
    8 N F, plus the generator's 2 x noise_dim x 3 x 64 x 64 FLOPs an image (no gradient)."""
    from tbdkit.adapters.pytorch_profiling import count_flops

    hp = MODEL.hp("smoke")
    d, z, n = hp["dim"], hp["noise_dim"], 3
    torch.manual_seed(0)
    layer = WORKLOAD.Critic(hp).input
    assert (layer.in_channels, layer.out_channels, layer.kernel_size, layer.padding) == (3, d, (3, 3), (1, 1))

    class OneLayerCritic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return self.layer(images).flatten(1).sum(1)

    pair = nn.Module()
    pair.generator = nn.Sequential(nn.Linear(z, 3 * 64 * 64), nn.Unflatten(1, (3, 64, 64)))
    pair.critic = OneLayerCritic()
    training = WORKLOAD.Training(pair, torch.optim.Adam(pair.generator.parameters()),
                                 torch.optim.Adam(pair.critic.parameters()), z, hp["gp_lambda"])
    precision = Precision("fp32", torch.device("cpu"))
    real = torch.rand(n, 3, 64, 64) * 2 - 1
    f = 2 * 64 * 64 * d * 3 * 9
    generator = 2 * z * 3 * 64 * 64
    got = count_flops(torch.device("cpu"), lambda: WORKLOAD.critic_step(training, real, precision), pair)
    assert got == 8 * n * f + n * generator


def test_flops_of_a_smoke_iteration_are_counted_through_the_gradient_penalty():
    """A whole iteration (a critic update with the penalty, then a generator update; one critic
    update and one image, to stay short) on the adapter's counter: a count, not the failure torch's
    module tracker raises under autograd.grad. Between 2x and 6x the forwards alone (per image 3
    critic and 1 generator forwards for the critic update, one of each for the generator's):
    backward and the penalty's double backward add about 2x to 4x their forward."""
    from torch.utils.flop_counter import FlopCounterMode

    from model_checks import adapter

    hp = {**MODEL.hp("smoke"), "critic_iters": 1}
    a = adapter("wgan_gp", "pytorch", hp=hp)
    batches = DATA.batches("synthetic", hp, 1, seed=0)
    step = lambda: a.step(a.prepare(next(batches)))  # noqa: E731
    step()
    total = a.count_flops(step)
    pair = a.training.model
    with torch.no_grad(), FlopCounterMode(display=False) as critic:
        pair.critic(torch.zeros(1, 3, 64, 64))
    with torch.no_grad(), FlopCounterMode(display=False) as generator:
        pair.generator(torch.zeros(1, hp["noise_dim"]))
    c, g = critic.get_total_flops(), generator.get_total_flops()
    forwards = (3 * c + g) + (c + g)
    assert 2 * forwards < total < 6 * forwards, (total, forwards)
