"""Models for the differential tests: each entry builds (model, input) in eval mode."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from verifuse.models import BasicBlock, randomize_batchnorm


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def conv_bn_relu(cin, cout, **kw):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, **kw), nn.BatchNorm2d(cout), nn.ReLU())


class WrappedBN(nn.Module):
    """A batch norm hidden inside a custom module (the seeds' toy model)."""

    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(x)


class CustomBNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = WrappedBN(8)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride=1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


class DepthwiseSeparable(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pw = nn.Conv2d(16, 32, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.grouped = nn.Conv2d(32, 32, 3, padding=2, dilation=2, groups=4)

    def forward(self, x):
        x = F.relu6(self.bn1(self.dw(x)))
        x = F.hardswish(self.bn2(self.pw(x)))
        return F.silu(self.grouped(x))


class AudioNet(nn.Module):
    """1-D convolutions over a waveform, as in keyword-spotting nets."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 16, 80, stride=16), nn.BatchNorm1d(16), nn.ReLU(), nn.MaxPool1d(4),
            nn.Conv1d(16, 32, 3, padding=1), nn.BatchNorm1d(32), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
        )
        self.fc = nn.Linear(32, 12)

    def forward(self, x):
        return self.fc(self.features(x).squeeze(-1)).log_softmax(-1)


class GraphBreakModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = conv_bn_relu(3, 8)
        self.b = conv_bn_relu(8, 8)

    def forward(self, x):
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


class ScaledAttention(nn.Module):
    """Hand-written attention: q @ k^T / sqrt(d) divides a tensor by a Python float."""

    def __init__(self, d=32):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.d = d

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-1, -2) / (self.d ** 0.5), dim=-1)
        return attn @ v


def _seq_model():
    return nn.Sequential(conv_bn_relu(3, 8), conv_bn_relu(8, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))


def _nested_seq():
    return nn.Sequential(nn.Sequential(conv_bn_relu(3, 8), nn.Sequential(conv_bn_relu(8, 8))), nn.Sequential(nn.Conv2d(8, 4, 1)))


def _encoder():
    return nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, activation="gelu", batch_first=True,
                                      dropout=0.1)


ZOO = {
    "mlp": (MLP, lambda: torch.randn(8, 32)),
    "lenet": (LeNet, lambda: torch.randn(2, 1, 28, 28)),
    "conv_bn_relu_sequential": (_seq_model, lambda: torch.randn(2, 3, 16, 16)),
    "nested_sequential": (_nested_seq, lambda: torch.randn(2, 3, 16, 16)),
    "bn_in_custom_module": (CustomBNModel, lambda: torch.randn(2, 3, 12, 12)),
    "resnet_basic_block": (lambda: BasicBlock(8, 16, 2), lambda: torch.randn(2, 8, 16, 16)),
    "resnet_bottleneck": (lambda: Bottleneck(16, 8, 2), lambda: torch.randn(2, 16, 16, 16)),
    "depthwise_grouped": (DepthwiseSeparable, lambda: torch.randn(2, 16, 12, 12)),
    "transformer_encoder": (_encoder, lambda: torch.randn(2, 10, 32)),
    "audio_conv1d": (AudioNet, lambda: torch.randn(2, 1, 4000)),
    "scaled_attention": (ScaledAttention, lambda: torch.randn(2, 7, 32)),
}


def build(name):
    make_model, make_input = ZOO[name]
    torch.manual_seed(0)
    model = randomize_batchnorm(make_model()).eval()
    return model, make_input()
