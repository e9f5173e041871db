"""A tiny training loop: a 2-layer MLP on kabi.ops.matmul follows the same MLP on torch.matmul step by step, eager
and compiled."""

import pytest
import torch

import kabi

STEPS = 8


class MLP(torch.nn.Module):
    def __init__(self, matmul, features=12, hidden=32, classes=5):
        super().__init__()
        self.matmul = matmul
        self.w1 = torch.nn.Parameter(torch.randn(features, hidden) / features**0.5)
        self.b1 = torch.nn.Parameter(torch.zeros(hidden))
        self.w2 = torch.nn.Parameter(torch.randn(hidden, classes) / hidden**0.5)
        self.b2 = torch.nn.Parameter(torch.zeros(classes))

    def forward(self, x):
        return self.matmul(torch.relu(self.matmul(x, self.w1) + self.b1), self.w2) + self.b2


def train(model, step, inputs, labels):
    """SGD on ``model``'s parameters, the loss computed by ``step`` (the model, or a compiled function of it)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(step(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "aot_eager"])
def test_mlp_on_kabi_trains_like_the_mlp_on_torch(compiled, untuned):
    inputs, labels = torch.randn(3, 16, 12), torch.randint(0, 5, (3, 16))
    labels = labels.reshape(-1)
    reference = MLP(torch.matmul)
    model = MLP(kabi.ops.matmul)
    model.load_state_dict(reference.state_dict())

    def flat(module):
        return lambda x: module(x).reshape(-1, 5)

    step = torch.compile(flat(model), backend="aot_eager", fullgraph=True) if compiled else flat(model)
    losses = train(model, step, inputs, labels)
    expected = train(reference, flat(reference), inputs, labels)
    assert losses[-1] < losses[0]
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=1e-6)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter, reference.get_parameter(name), rtol=1e-4, atol=1e-5)
