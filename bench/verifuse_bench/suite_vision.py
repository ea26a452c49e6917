"""``--suite timm`` and ``--suite torchvision``: the image models of inductor's own dashboard
suites, built with ``pretrained=False`` / ``weights=None`` (random weights, nothing downloaded), in
eval mode. BatchNorm layers get random affine parameters and running statistics from forward
passes on random data (``suites.init_norms``), so eval-mode BN is not the identity and conv+BN
folding is really exercised. Input: random images (deterministic per seed and batch), 224x224
unless noted (Inception v3: 299x299). Compared against eager: the logits (DeepLabV3: ``out``).

torchvision (and timm, which imports it) are made importable by ``vendor.ensure_torchvision``
in the bench process only; see vendor.py and docs/benchmarking.md.
"""

from __future__ import annotations

import torch.nn as nn

from .suites import BenchModel, image_inputs, select_all, select_key

CNN_BATCHES = (1, 32)
VIT_BATCHES = (1, 8)


def _timm(name: str, **kw):
    def build(seed: int) -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return build


def _tv(name: str, **kw):
    def build(seed: int) -> nn.Module:
        import torchvision.models as tvm

        return tvm.get_model(name, weights=None, **kw)

    return build


def _t(short, family, description, timm_name, size=224, batches=CNN_BATCHES, tiny=False, **kw):
    return BenchModel(name=f"timm_{short}", suite="timm", family=family,
                      description=f"timm.create_model({timm_name!r}, pretrained=False): {description}",
                      builder=_timm(timm_name, **kw), inputs=image_inputs(size),
                      input_desc=f"image 3x{size}x{size}", output="logits", select=select_all,
                      default_batches=batches, requires=("torchvision", "timm"), tiny=tiny)


def _v(short, family, description, tv_name, size=224, batches=CNN_BATCHES, output="logits", tiny=False,
       **kw):
    return BenchModel(name=f"tv_{short}", suite="torchvision", family=family,
                      description=f"torchvision.models.{tv_name}(weights=None): {description}",
                      builder=_tv(tv_name, **kw), inputs=image_inputs(size),
                      input_desc=f"image 3x{size}x{size}", output=output,
                      select=select_all if output == "logits" else select_key(output),
                      default_batches=batches, requires=("torchvision",), tiny=tiny)


def timm_entries() -> list[BenchModel]:
    return [
        _t("resnet50", "cnn", "ResNet-50", "resnet50"),
        _t("mobilenetv3_large", "cnn", "MobileNetV3-Large 1.0", "mobilenetv3_large_100"),
        _t("efficientnet_b0", "cnn", "EfficientNet-B0", "efficientnet_b0"),
        _t("convnext_tiny", "cnn", "ConvNeXt-tiny", "convnext_tiny"),
        _t("densenet121", "cnn", "DenseNet-121", "densenet121"),
        _t("inception_v3", "cnn", "Inception v3, 299x299", "inception_v3", size=299),
        _t("vit_base", "transformer", "ViT-B/16", "vit_base_patch16_224", batches=VIT_BATCHES),
        _t("swin_tiny", "transformer", "Swin-T, window 7", "swin_tiny_patch4_window7_224", batches=VIT_BATCHES),
        _t("regnety_016", "cnn", "RegNetY-1.6GF", "regnety_016"),
        # tiny stand-in (tests, smoke runs)
        _t("test_resnet", "cnn", "timm's test_resnet at 64x64 (tests)", "test_resnet", size=64, batches=(2,),
           tiny=True),
    ]


def torchvision_entries() -> list[BenchModel]:
    return [
        _v("resnet50", "cnn", "ResNet-50", "resnet50"),
        _v("mobilenet_v3_large", "cnn", "MobileNetV3-Large", "mobilenet_v3_large"),
        _v("efficientnet_b0", "cnn", "EfficientNet-B0", "efficientnet_b0"),
        _v("convnext_tiny", "cnn", "ConvNeXt-tiny", "convnext_tiny"),
        _v("densenet121", "cnn", "DenseNet-121", "densenet121"),
        _v("inception_v3", "cnn", "Inception v3 (no aux head), 299x299", "inception_v3", size=299,
           aux_logits=False, init_weights=True),
        _v("vit_b_16", "transformer", "ViT-B/16", "vit_b_16", batches=VIT_BATCHES),
        _v("swin_t", "transformer", "Swin-T", "swin_t", batches=VIT_BATCHES),
        _v("regnet_y_1_6gf", "cnn", "RegNetY-1.6GF", "regnet_y_1_6gf"),
        _v("shufflenet_v2", "cnn", "ShuffleNetV2 x1.0", "shufflenet_v2_x1_0"),
        _v("deeplabv3_resnet50", "cnn", "DeepLabV3 ResNet-50 (21 classes, no aux head), 224x224 "
           "(torchvision evaluates at 520)", "deeplabv3_resnet50", output="out", batches=(1, 4),
           weights_backbone=None, aux_loss=False),
        # tiny stand-in (tests, smoke runs)
        _v("shufflenet_tiny", "cnn", "ShuffleNetV2 x0.5 at 64x64 (tests)", "shufflenet_v2_x0_5", size=64,
           batches=(2,), tiny=True),
    ]
