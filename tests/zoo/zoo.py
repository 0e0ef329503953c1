#!/usr/bin/env python3
"""The model-zoo harness: models from torchvision, timm and Hugging Face
transformers (built from constructors and configs with seeded random
weights; nothing is downloaded), each exported portably and through the
XNNPACK partitioner, bundled with eager PyTorch's outputs and checked with
`ptec check` (the release CLI, `cargo build --release -p ptec-cli`).

    /opt/ptec-venv/bin/python tests/zoo/zoo.py             # the default list
    /opt/ptec-venv/bin/python tests/zoo/zoo.py --full      # every list
    /opt/ptec-venv/bin/python tests/zoo/zoo.py --full --resume  # on from a run cut short
    /opt/ptec-venv/bin/python tests/zoo/zoo.py --only NAME...

writes a table (model, lowering, instructions, result with the first
reason, generation time) to stdout and, for --full, docs/model-coverage.md.
The default list holds tiny configurations of each family; its bundles
are committed under tests/zoo/default/ with manifest.json, which
`compiler/cli/tests/zoo.rs` checks without Python (`--commit` rewrites
them).

Pinned: torch 2.14.1, executorch 1.5.1, torchvision 0.29.2, timm 1.0.31,
transformers 5.24.0, torchaudio 2.11.0 (`pip install -c <(echo torch==2.14.1)
torchvision==0.29.2 timm==1.0.31 transformers==5.24.0` and `pip install
--no-deps torchaudio==2.11.0`: no torchaudio is built for torch 2.14, and
the models it provides need none of its compiled parts); for et_yolo26,
ultralytics 8.4.190; for et_edsr, torchsr 1.0.4 (`pip install --no-deps`:
it needs only torch and torchvision).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "fuzz" / "models"))

import exporting  # noqa: E402  (export helpers and the `ptec check` driver)
import torch  # noqa: E402

PINNED = {
    "torch": "2.14.1",
    "executorch": "1.5.1",
    "torchvision": "0.29.2",
    "timm": "1.0.31",
    "transformers": "5.24.0",
    "torchaudio": "2.11.0",
}
DEFAULT_DIR = HERE / "default"
# The rows of --full runs, which --resume goes on from.
COVERAGE = HERE / "coverage.json"


def image(h=32, w=32, c=3, batch=1):
    return lambda g: (torch.randn(batch, c, h, w, generator=g),)


def tokens(vocab=100, seq=16, mask=True):
    def make(g):
        ids = torch.randint(0, vocab, (1, seq), generator=g)
        if not mask:
            return (ids,)
        m = torch.ones(1, seq, dtype=torch.long)
        m[0, seq - 3 :] = 0
        return (ids, m)

    return make


class Outputs(torch.nn.Module):
    """A model whose output is a dict, a ModelOutput or a list, as a tuple
    of its tensors (`keys`, or indices, in order)."""

    def __init__(self, model, keys):
        super().__init__()
        self.model = model
        self.keys = keys

    def forward(self, *xs):
        out = self.model(*xs)
        return tuple(out[k] for k in self.keys)


# --------------------------------------------------------------------------
# The lists: name -> (constructor, inputs). Constructors import lazily, so
# that a missing zoo only fails its own models.


def tv(name, **kw):
    def make():
        import torchvision.models
        import torchvision.models.segmentation

        if hasattr(torchvision.models.segmentation, name):
            # Segmentation models return {"out": ...}.
            return Outputs(getattr(torchvision.models.segmentation, name)(weights=None, **kw), ["out"])
        return getattr(torchvision.models, name)(weights=None, **kw)

    return make


def calibrated(make, shape):
    """`make`'s model with its batch norms' statistics measured on eight
    random inputs of `shape` (as training would leave them). With the
    default statistics (mean 0, variance 1) they normalise nothing: Inception
    v3's initialisation (normal, std 0.1) then grows its activations about
    twofold a convolution, to logits near 2e9 whose float32 rounding alone
    is 2e3."""

    def build():
        model = make()
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.reset_running_stats()
                m.momentum = None  # the plain average over the batch
        model.train()
        with torch.no_grad():
            model(torch.randn(8, *shape, generator=torch.Generator().manual_seed(2)))
        return model.eval()

    return build


def head_drawn(make):
    """`make`'s model with its zero-initialised classifier head (torchvision's
    ViT) drawn at random: a zero head makes every output 0, which any result
    matches."""

    def build():
        model = make()
        head = model.heads.head
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=g) * head.in_features**-0.5)
            head.bias.copy_(torch.randn(head.bias.shape, generator=g) * 0.01)
        return model

    return build


def tv_video(name):
    def make():
        import torchvision.models.video

        return getattr(torchvision.models.video, name)(weights=None)

    return make


def video(frames=8, size=64):
    return lambda g: (torch.randn(1, 3, frames, size, size, generator=g),)


def tv_flow():
    def make():
        import torchvision.models.optical_flow as F

        # The final flow of the (default 12) refinement iterations.
        return Outputs(F.raft_small(weights=None), [-1])

    return make


def flow_pair():
    return lambda g: (torch.randn(1, 3, 128, 128, generator=g), torch.randn(1, 3, 128, 128, generator=g))


def tv_tiny(which):
    def make():
        import torchvision.models as M
        from torchvision.models.convnext import CNBlockConfig
        from torchvision.models.efficientnet import _efficientnet_conf
        from torchvision.models.regnet import BlockParams

        if which == "efficientnet":
            settings, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
            return M.EfficientNet(settings, 0.2, last_channel=last, num_classes=10)
        if which == "convnext":
            blocks = [CNBlockConfig(8, 16, 1), CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
            return M.ConvNeXt(blocks, num_classes=10)
        if which == "regnet":
            return M.RegNet(BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8), num_classes=10)
        if which == "shufflenet":
            return M.ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], num_classes=10)
        if which == "swin":
            return M.SwinTransformer([4, 4], 16, [1, 1], [1, 2], [4, 4], num_classes=10)
        if which == "vit":
            return M.VisionTransformer(32, 8, 2, 2, 32, 64, num_classes=10)
        if which == "mnasnet":
            return M.MNASNet(0.25, num_classes=10)
        if which == "densenet":
            return M.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=10)
        raise KeyError(which)

    return make


def torchaudio_model(which):
    """ExecuTorch's examples/models/wav2letter and emformer_rnnt: torchaudio's
    architectures (Emformer RNN-T at 2 layers of 64 rather than 20 of 1024)."""

    def make():
        from torchaudio import models as A

        if which == "wav2letter":
            return A.Wav2Letter(num_classes=4096)
        rnnt = A.emformer_rnnt_model(
            input_dim=80, encoding_dim=64, num_symbols=100, segment_length=16, right_context_length=4,
            time_reduction_input_dim=32, time_reduction_stride=4, transformer_num_heads=2, transformer_ffn_dim=128,
            transformer_num_layers=2, transformer_dropout=0.1, transformer_activation="gelu",
            transformer_left_context_length=30, transformer_max_memory_size=0,
            transformer_weight_init_scale_strategy="depthwise", transformer_tanh_on_mem=True,
            symbol_embedding_dim=32, num_lstm_layers=2, lstm_layer_norm=True, lstm_layer_norm_epsilon=1e-3,
            lstm_dropout=0.3,
        )
        return RnntPart(rnnt, which)

    return make


def silero_vad():
    """ExecuTorch's examples/models/silero_vad: the 16 kHz Silero VAD as its
    export script rebuilds it (learned STFT, convolutions, an LSTM cell),
    random weights; one 576-sample window and the LSTM state in, the
    speech probability and the next state out."""
    from executorch.examples.models.silero_vad.export_silero_vad import SileroVAD16k

    return SileroVAD16k().eval()


# Pinned for et_yolo26 alone (the other models do not need it).
ULTRALYTICS = "8.4.190"
TORCHSR = "1.0.4"


class FirstOutput(torch.nn.Module):
    """A model's first output (YOLO's second is a dict of its raw maps)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)[0]


def edsr():
    """ExecuTorch's examples/models/edsr: torchsr's EDSR (16 blocks, 64
    features, 2x), the network its `EdsrModel` builds, with random weights
    (the class asks for pretrained ones, which it would download)."""
    have = importlib.metadata.version("torchsr")
    if have != TORCHSR:
        raise RuntimeError(f"et_edsr needs torchsr {TORCHSR}, this environment has {have}")
    from torchsr.models import edsr_r16f64

    return edsr_r16f64(2, False)


def yolo26():
    """ExecuTorch's examples/models/yolo26: Ultralytics' YOLO26n detector
    built from its configuration (random weights; nothing downloaded)."""
    have = importlib.metadata.version("ultralytics")
    if have != ULTRALYTICS:
        raise RuntimeError(f"et_yolo26 needs ultralytics {ULTRALYTICS}, this environment has {have}")
    from ultralytics import YOLO

    return FirstOutput(YOLO("yolo26n.yaml").model.eval())


def et_example(module, cls):
    """One of ExecuTorch's examples/models as the wheel's model class builds
    it (`get_eager_model`), or the module itself where the class is one."""

    def make():
        model = getattr(importlib.import_module(f"executorch.examples.models.{module}"), cls)()
        return model.get_eager_model() if hasattr(model, "get_eager_model") else model

    return make


def et_example_inputs(module, cls):
    """Fresh random inputs of the shapes and dtypes of the class's
    `get_example_inputs`."""

    def make(g):
        model = getattr(importlib.import_module(f"executorch.examples.models.{module}"), cls)()
        like = model.get_example_inputs()
        return tuple(
            torch.randn(x.shape, generator=g, dtype=x.dtype) if x.is_floating_point()
            else torch.randint(0, 10, x.shape, generator=g, dtype=x.dtype)
            for x in like
        )

    return make


class Lstm(torch.nn.Module):
    """examples/models/lstm: a quantizable two-layer LSTM, its state in and
    out as tensors rather than a nested tuple."""

    def __init__(self):
        super().__init__()
        from executorch.examples.models.lstm.model import LSTMModel

        self.lstm = LSTMModel().get_eager_model()

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return y, h, c


def lstm_inputs(g):
    return (torch.randn(5, 3, 10, generator=g), torch.randn(2, 3, 20, generator=g), torch.randn(2, 3, 20, generator=g))


def efficient_sam_tiny():
    """examples/models/efficient_sam: the wheel's EfficientSAM classes as
    build_efficient_sam assembles them, at a 64 x 64 image, width 32 and
    two layers (the wheel's ViT-T is 1024 x 1024 with downloaded weights)."""
    from executorch.examples.models.efficient_sam.efficient_sam_core import efficient_sam as S
    from executorch.examples.models.efficient_sam.efficient_sam_core.efficient_sam_decoder import (
        MaskDecoder,
        PromptEncoder,
    )
    from executorch.examples.models.efficient_sam.efficient_sam_core.efficient_sam_encoder import ImageEncoderViT
    from executorch.examples.models.efficient_sam.efficient_sam_core.two_way_transformer import TwoWayTransformer

    gelu = torch.nn.GELU
    encoder = ImageEncoderViT(
        img_size=64, patch_size=16, in_chans=3, patch_embed_dim=32, normalization_type="layer_norm", depth=2,
        num_heads=2, mlp_ratio=2.0, neck_dims=[32, 32], act_layer=gelu,
    )
    size = encoder.image_embedding_size
    dim = encoder.transformer_output_dim
    decoder = MaskDecoder(
        transformer_dim=dim,
        transformer=TwoWayTransformer(depth=2, embedding_dim=dim, num_heads=2, mlp_dim=64, activation=gelu,
                                      normalize_before_activation=False),
        num_multimask_outputs=3, activation=gelu, normalization_type="layer_norm",
        normalize_before_activation=False, iou_head_depth=2, iou_head_hidden_dim=32, upscaling_layer_dims=[16, 8],
    )
    return S.EfficientSam(
        image_encoder=encoder,
        prompt_encoder=PromptEncoder(embed_dim=dim, image_embedding_size=(size, size), input_image_size=(64, 64)),
        decoder_max_num_input_points=6, mask_decoder=decoder,
        pixel_mean=[0.485, 0.456, 0.406], pixel_std=[0.229, 0.224, 0.225],
    )


def sam_inputs(g):
    return (
        torch.randn(1, 3, 64, 64, generator=g),
        torch.rand(1, 1, 2, 2, generator=g) * 64,
        torch.ones(1, 1, 2),
    )


def vad_inputs(g):
    return (torch.randn(1, 576, generator=g), 0.1 * torch.randn(2, 1, 128, generator=g))


class RnntPart(torch.nn.Module):
    """One of the three programs ExecuTorch's Emformer RNN-T example exports."""

    def __init__(self, rnnt, which):
        super().__init__()
        self.rnnt = rnnt
        self.which = which

    def forward(self, *xs):
        if self.which == "emformer_transcribe":
            return self.rnnt.transcribe(*xs)
        if self.which == "emformer_predict":
            return self.rnnt.predict(*xs, None)[:2]
        return self.rnnt.join(*xs)


def emformer_inputs(which):
    def make(g):
        if which == "emformer_transcribe":
            return (torch.randn(1, 128, 80, generator=g), torch.tensor([128]))
        if which == "emformer_predict":
            return (torch.randint(0, 100, (1, 16), generator=g), torch.tensor([16]))
        return (torch.randn(1, 32, 64, generator=g), torch.tensor([32]), torch.randn(1, 16, 64, generator=g), torch.tensor([16]))

    return make


def timm_model(name, **kw):
    def make():
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return make


def hf(which, seq=16):
    def make():
        import transformers as T

        small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
        if which == "bert":
            cfg = T.BertConfig(vocab_size=100, max_position_embeddings=64, **small)
            return Outputs(T.BertModel(cfg).eval(), ["last_hidden_state", "pooler_output"])
        if which == "distilbert":
            cfg = T.DistilBertConfig(vocab_size=100, max_position_embeddings=64, dim=32, n_layers=2, n_heads=2, hidden_dim=64)
            return Outputs(T.DistilBertModel(cfg).eval(), ["last_hidden_state"])
        if which == "gpt2":
            cfg = T.GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2, use_cache=False)
            return Outputs(T.GPT2LMHeadModel(cfg).eval(), ["logits"])
        if which == "vit":
            cfg = T.ViTConfig(image_size=32, patch_size=8, **small)
            return Outputs(T.ViTModel(cfg).eval(), ["last_hidden_state"])
        if which == "t5_encoder":
            cfg = T.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)
            return Outputs(T.T5EncoderModel(cfg).eval(), ["last_hidden_state"])
        def whisper(enc, dec):
            # 2 layers on the side exported, 1 on the other.
            return T.WhisperConfig(
                vocab_size=100, num_mel_bins=16, d_model=32, encoder_layers=enc, encoder_attention_heads=2,
                encoder_ffn_dim=64, decoder_layers=dec, decoder_attention_heads=2, decoder_ffn_dim=64,
                max_source_positions=16, max_target_positions=16, pad_token_id=1, bos_token_id=1,
                eos_token_id=2, decoder_start_token_id=1,
            )

        if which == "whisper_encoder":
            cfg = whisper(2, 1)
            return Outputs(T.WhisperModel(cfg).get_encoder().eval(), ["last_hidden_state"])
        if which == "gpt2_cache":
            cfg = T.GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2, use_cache=True)
            return GPT2Step(T.GPT2LMHeadModel(cfg).eval())
        if which == "whisper_decoder":
            cfg = whisper(1, 2)
            return WhisperDecoder(T.WhisperModel(cfg).get_decoder().eval())
        if which == "minilm":
            # all-MiniLM-L6-v2's shapes.
            cfg = T.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
            return Outputs(T.BertModel(cfg, add_pooling_layer=False).eval(), ["last_hidden_state"])
        if which == "mobilebert":
            # ExecuTorch's examples/models/mobilebert, at google/mobilebert-uncased's (default) shapes.
            return Outputs(T.MobileBertModel(T.MobileBertConfig()).eval(), ["last_hidden_state", "pooler_output"])
        if which == "dinov2":
            # ExecuTorch's examples/models/dinov2 (Dinov2ForImageClassification), tiny.
            cfg = T.Dinov2Config(image_size=32, patch_size=8, num_labels=10, **small)
            return Outputs(T.Dinov2ForImageClassification(cfg).eval(), ["logits"])
        if which == "wav2vec2":
            cfg = T.Wav2Vec2Config(
                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=2, **small,
            )
            return Outputs(T.Wav2Vec2Model(cfg).eval(), ["last_hidden_state"])
        raise KeyError(which)

    return make


class GPT2Step(torch.nn.Module):
    """One decode step of GPT-2 with its key/value cache: the cache comes
    in as tensors (layer by layer, keys then values) and goes out with the
    new position appended."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        kv = out.past_key_values
        return (out.logits,) + tuple(t for layer in kv.layers for t in (layer.keys, layer.values))


def gpt2_step(g, layers=2, heads=2, head_dim=16, past=7):
    ids = torch.randint(0, 100, (1, 1), generator=g)
    return (ids,) + tuple(torch.randn(1, heads, past, head_dim, generator=g) for _ in range(2 * layers))


class WhisperDecoder(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, ids, encoded):
        return self.decoder(input_ids=ids, encoder_hidden_states=encoded).last_hidden_state


def whisper_decoder_inputs(g):
    return (torch.randint(0, 100, (1, 8), generator=g), torch.randn(1, 16, 32, generator=g))


def audio(*shape):
    return lambda g: (torch.randn(*shape, generator=g),)


DEFAULT = {
    # Calibrated: with their batch norms' default statistics these three's
    # outputs are 1e-7 to 1e-11, near enough to zero that little is tested.
    "tv_mobilenet_v2": (calibrated(tv("mobilenet_v2", width_mult=0.25, num_classes=10), (3, 32, 32)), image()),
    "tv_mobilenet_v3_small": (
        calibrated(tv("mobilenet_v3_small", width_mult=0.25, num_classes=10), (3, 32, 32)),
        image(),
    ),
    "tv_efficientnet": (calibrated(tv_tiny("efficientnet"), (3, 32, 32)), image()),
    "tv_convnext": (tv_tiny("convnext"), image()),
    "tv_regnet": (tv_tiny("regnet"), image()),
    "tv_shufflenet_v2": (tv_tiny("shufflenet"), image()),
    "tv_swin": (tv_tiny("swin"), image(64, 64)),
    "tv_vit": (head_drawn(tv_tiny("vit")), image()),
    "tv_densenet": (tv_tiny("densenet"), image()),
    "timm_vit": (
        timm_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10),
        image(),
    ),
    "timm_convnext": (timm_model("convnext_atto", dims=(8, 16, 32, 64), depths=(1, 1, 1, 1), num_classes=10), image()),
    "hf_bert": (hf("bert"), tokens()),
    "hf_distilbert": (hf("distilbert"), tokens()),
    "hf_gpt2": (hf("gpt2"), tokens(mask=False)),
    "hf_vit": (hf("vit"), image()),
    "hf_t5_encoder": (hf("t5_encoder"), tokens()),
    # 16 mel bins by 32 frames (the encoder's two convolutions halve them to its 16 positions).
    "hf_whisper_encoder": (hf("whisper_encoder"), audio(1, 16, 32)),
    "hf_wav2vec2": (hf("wav2vec2"), audio(1, 400)),
}

# Beyond the default list, smallest first, then the default list: a run
# cut short has done the most of what the default list does not show.
FULL = dict(
    {
        "tv_mnasnet_tiny": (tv_tiny("mnasnet"), image()),
        # 2.6 MB each way at its smallest (a 1280-wide head): not in the default list.
        "timm_mobilenetv4_035": (timm_model("mobilenetv4_conv_small_035", num_classes=10), image()),
        "tv_squeezenet1_1": (tv("squeezenet1_1"), image(64, 64)),
        "timm_mobilevit_xxs": (timm_model("mobilevit_xxs"), image(64, 64)),
        "tv_mnasnet0_5": (tv("mnasnet0_5"), image(64, 64)),
        "timm_regnety_002": (timm_model("regnety_002"), image(64, 64)),
        "tv_lraspp": (tv("lraspp_mobilenet_v3_large", weights_backbone=None, num_classes=3), image(64, 64)),
        "tv_regnet_y_400mf": (tv("regnet_y_400mf"), image(64, 64)),
        "tv_efficientnet_b0": (tv("efficientnet_b0"), image(64, 64)),
        "tv_mobilenet_v3_large": (tv("mobilenet_v3_large"), image(64, 64)),
        "timm_resnet10t": (timm_model("resnet10t"), image(64, 64)),
        "timm_deit_tiny": (timm_model("deit_tiny_patch16_224", img_size=64), image(64, 64)),
        "tv_googlenet": (tv("googlenet", aux_logits=False, init_weights=True), image(64, 64)),
        "tv_densenet121": (tv("densenet121"), image(64, 64)),
        "tv_deeplabv3_mobilenet": (tv("deeplabv3_mobilenet_v3_large", weights_backbone=None, num_classes=3), image(64, 64)),
        # Its attention's position biases are sized for 7 x 7 tokens: 224 x 224 images.
        "timm_efficientformer_l1": (timm_model("efficientformer_l1"), image(224, 224)),
        "timm_efficientnetv2": (timm_model("efficientnetv2_rw_t"), image(64, 64)),
        "timm_cspresnet50": (timm_model("cspresnet50"), image(64, 64)),
        "tv_resnet50": (tv("resnet50"), image(64, 64)),
        "tv_swin_t": (tv("swin_t"), image(64, 64)),
        "tv_convnext_tiny": (tv("convnext_tiny"), image(64, 64)),
        "timm_swin_tiny": (timm_model("swin_tiny_patch4_window7_224", img_size=64, window_size=4), image(64, 64)),
        "tv_vit_b_16": (head_drawn(tv("vit_b_16", image_size=64)), image(64, 64)),
        # Broader: the rest of torchvision's classifiers and segmenters,
        # optical flow and video; timm's ResNet-D and EfficientNet;
        # transformers' remaining families; ExecuTorch's example models.
        "hf_gpt2_cache": (hf("gpt2_cache"), gpt2_step),
        "hf_whisper_decoder": (hf("whisper_decoder"), whisper_decoder_inputs),
        "et_emformer_transcribe": (torchaudio_model("emformer_transcribe"), emformer_inputs("emformer_transcribe")),
        "et_emformer_predict": (torchaudio_model("emformer_predict"), emformer_inputs("emformer_predict")),
        "et_emformer_join": (torchaudio_model("emformer_join"), emformer_inputs("emformer_join")),
        "et_wav2letter": (torchaudio_model("wav2letter"), audio(10, 1, 700)),
        "tv_shufflenet_v2_x1_0": (tv("shufflenet_v2_x1_0"), image(64, 64)),
        "tv_mobilenet_v2_full": (tv("mobilenet_v2"), image(64, 64)),
        "tv_resnet18": (tv("resnet18"), image(64, 64)),
        "tv_regnet_x_400mf": (tv("regnet_x_400mf"), image(64, 64)),
        "timm_resnet18d": (timm_model("resnet18d"), image(64, 64)),
        "timm_efficientnet_b0": (timm_model("efficientnet_b0"), image(64, 64)),
        "tv_alexnet": (tv("alexnet"), image(64, 64)),
        "hf_minilm": (hf("minilm"), tokens(vocab=30522)),
        "tv_inception_v3": (calibrated(tv("inception_v3", aux_logits=False, init_weights=True), (3, 96, 96)), image(96, 96)),
        "tv_efficientnet_v2_s": (tv("efficientnet_v2_s"), image(64, 64)),
        "et_mobilebert": (hf("mobilebert"), tokens(vocab=30522)),
        "tv_resnext50_32x4d": (tv("resnext50_32x4d"), image(64, 64)),
        "tv_fcn_resnet50": (tv("fcn_resnet50", weights_backbone=None, num_classes=3, aux_loss=False), image(64, 64)),
        "tv_swin_v2_t": (tv("swin_v2_t"), image(64, 64)),
        "tv_r3d_18": (tv_video("r3d_18"), video()),
        "tv_s3d": (tv_video("s3d"), video(16, 224)),
        "tv_raft_small": (tv_flow(), flow_pair()),
        "tv_maxvit_t": (tv("maxvit_t"), image(224, 224)),
        "hf_dinov2": (hf("dinov2"), image()),
        "et_silero_vad": (silero_vad, vad_inputs),
        "et_yolo26": (yolo26, image(64, 64)),
        # The rest of ExecuTorch's examples/models that build from the
        # pinned packages without downloads (see EXAMPLES below).
        "et_lstm": (Lstm, lstm_inputs),
        **{
            f"et_toy_{name}": (et_example("toy_model", cls), et_example_inputs("toy_model", cls))
            for name, cls in [("mul", "MulModule"), ("linear", "LinearModule"), ("add", "AddModule"),
                              ("add_mul", "AddMulModule"), ("softmax", "SoftmaxModule"),
                              ("conv1d", "Conv1dModule"), ("sdpa", "SdpaModule")]
        },
        **{
            f"et_mlperf_{name}": (et_example("mlperf_tiny", cls), et_example_inputs("mlperf_tiny", cls))
            for name, cls in [("deep_autoencoder", "DeepAutoEncoderModel"), ("ds_cnn", "DSCNNKWSModel"),
                              ("mobilenet_v1_025", "MobileNetV1025Model"), ("resnet8", "ResNet8Model")]
        },
        "et_efficient_sam": (efficient_sam_tiny, sam_inputs),
        "et_edsr": (edsr, image(32, 32)),
        # examples/models/deeplab_v3 and inception_v4 (the wheel's load
        # downloaded weights; these are the same constructors without).
        "et_deeplab_v3": (tv("deeplabv3_resnet50", weights_backbone=None, num_classes=3, aux_loss=False), image(64, 64)),
        "et_inception_v4": (timm_model("inception_v4"), image(96, 96)),
    }
)
FULL.update(DEFAULT)


# Every directory of the pinned wheel's executorch/examples/models and
# where it is checked: zoo models (their result is read from the rows),
# fixtures (`cargo test` compiles each and checks it against ExecuTorch's
# runtime; see tests/fixtures/README.md and docs/llm-families.md), or why
# it is not exported. compiler/cli/tests/model_coverage.rs fails when a
# directory of the wheel is missing from docs/model-coverage.md's table.
def _llm(name):
    return [f"llm_{name}", f"xnnpack_llm_{name}"]


IGNORED = "the pinned export_llama ignores"
TORCHTUNE = "its code imports torchtune, which is not in the pins: `ModuleNotFoundError: No module named 'torchtune'`"
MLX_ONLY = (
    "the wheel cannot load its MLX delegate: `ImportError: MLX delegate generated files not found. Run "
    "'python install_executorch.py' first.`"
)
EXAMPLES = {
    "codegen": {"fixtures": _llm("codegen"), "note": "CodeGen's params.json keys through export_llama (the directory holds only convert_weight.py); " + IGNORED + " its layer norms, missing feed-forward norm and biased output: the program has Hugging Face's rotary layout on half of each head"},
    "deepseek-r1-distill-llama-8B": {"fixtures": ["xnnpack_llama_8da4w"], "note": "only a recipe (`config/deepseek_xnnpack_q8da4w.yaml`): export_llama's Llama 3 through XNNPACK with 8da4w"},
    "deeplab_v3": {"zoo": ["et_deeplab_v3"], "note": "torchvision's DeepLabV3-ResNet50, as the wheel's class builds it, without the downloaded weights"},
    "deit_tiny": {"zoo": ["timm_deit_tiny"]},
    "dinov2": {"zoo": ["hf_dinov2"]},
    "edsr": {"zoo": ["et_edsr"], "note": "the network the wheel's `EdsrModel` builds (torchsr's EDSR r16f64, 2x), with random weights where the class downloads pretrained ones"},
    "efficient_sam": {"zoo": ["et_efficient_sam"], "note": "the wheel's EfficientSAM classes at a 64 x 64 image, width 32, two layers (its ViT-T needs downloaded weights)"},
    "emformer_rnnt": {"zoo": ["et_emformer_transcribe", "et_emformer_predict", "et_emformer_join"]},
    "gemma": {"fixtures": _llm("gemma1"), "note": "Gemma's params.json keys through export_llama (the directory holds only convert_weights.py); " + IGNORED + " its GELU, norm type and embedding scale: the program is a Llama with one KV head"},
    "gemma2": {"fixtures": _llm("gemma2"), "note": "Gemma 2's params.json keys through export_llama; " + IGNORED + " its GELU, post-norms and soft-capping: the program has its sliding-window layer"},
    "gemma3": {"fixtures": _llm("gemma3"), "note": "Gemma 3's params.json keys through export_llama; " + IGNORED + " its GELU, post-norms, embedding scale and local rotary base: the program has its normed queries and keys and sliding-window layer"},
    "gemma4": {"fixtures": ["xnnpack_gemma4"], "note": "its text decoder through export_gemma4.py's own functions (XNNPACK) at a tiny config of ours (the wheel ships none): per-layer embeddings, layers sharing an earlier layer's keys and values, sliding and global layers, caches written at the run-time position; a prompt then seven tokens on one cache, against eager PyTorch (docs/llm-families.md#gemma-4)"},
    "gemma4_31b": {"why": "its `export.py` lowers to CUDA or MLX only (no portable or XNNPACK path); " + MLX_ONLY},
    "glm": {"fixtures": _llm("glm"), "note": "GLM's params.json features through export_llama: Hugging Face's rotary layout, a head wider than dim / heads"},
    "granite": {"fixtures": ["llama_dynamic", "xnnpack_llama_dynamic"], "note": "Granite's params.json keys through export_llama (the directory holds only convert_weights.py); " + IGNORED + " all of its multipliers and its embedding scale: the program is a plain Llama (`llm_granite` made and passed, not kept; docs/llm-families.md)"},
    "granite_speech": {"fixtures": ["llama_dynamic"], "why": "only `convert_weights.py` for its Granite text decoder (a plain Llama as export_llama builds it; see granite), and it does not import: " + TORCHTUNE + "; the wheel has no export of its speech encoder"},
    "inception_v3": {"zoo": ["tv_inception_v3"]},
    "inception_v4": {"zoo": ["et_inception_v4"], "note": "timm's, as the wheel's class builds it, without the downloaded weights"},
    "internvl3": {"fixtures": _llm("qwen2_5"), "why": "only `convert_weights.py`, mapping its Qwen2.5 text decoder for export_llama (the qwen2_5 fixtures' architecture); the wheel has no export of its vision encoder"},
    "lfm2": {"fixtures": _llm("lfm2") + ["xnnpack_llm_lfm2_8da4w"]},
    "llama": {"fixtures": ["llama_kv", "llama_dynamic", "xnnpack_llama_dynamic", "xnnpack_llama_8da4w"], "note": "and the other `llama*` fixtures; `examples/llama`"},
    "llama3_2_vision": {"why": TORCHTUNE},
    "llava": {"fixtures": ["llava", "xnnpack_llava", "xnnpack_llava_recipe"], "note": "`examples/multimodal` runs a whole turn"},
    "lstm": {"zoo": ["et_lstm"]},
    "mlperf_tiny": {"zoo": ["et_mlperf_deep_autoencoder", "et_mlperf_ds_cnn", "et_mlperf_mobilenet_v1_025", "et_mlperf_resnet8"], "note": "also int8 on emulated Cortex-M and RISC-V boards (`examples/cortex-m`, docs/cortex-m.md)"},
    "mobilebert": {"zoo": ["et_mobilebert"]},
    "mobilenet_v2": {"zoo": ["tv_mobilenet_v2_full", "tv_mobilenet_v2"]},
    "mobilenet_v3": {"zoo": ["tv_mobilenet_v3_small", "tv_mobilenet_v3_large"]},
    "moshi": {"why": "only a test (`mimi/test_mimi.py`) that builds Mimi with the moshi package and downloads its weights: `ModuleNotFoundError: No module named 'moshi'`"},
    "muse-glimmer": {"why": "the same sources as muse_glimmer (an alias directory)"},
    "muse_glimmer": {"why": "its export scripts lower to CUDA or MLX only; " + MLX_ONLY},
    "parakeet": {"why": "`export_parakeet_tdt.py` builds the model with NeMo from a downloaded checkpoint: `ModuleNotFoundError: No module named 'torchaudio'` in the pinned environment, then `No module named 'nemo'` (NeMo is not in the pins)"},
    "phi-3-mini": {"why": "its `__init__.py` imports a module the wheel does not ship: `ModuleNotFoundError: No module named 'executorch.examples.models.phi-3-mini.phi_3_mini'`"},
    "phi-3-mini-lora": {"why": TORCHTUNE},
    "phi_4_mini": {"fixtures": _llm("phi4") + ["xnnpack_llm_phi4_8da4w"]},
    "qwen2_5": {"fixtures": _llm("qwen2_5")},
    "qwen3": {"fixtures": _llm("qwen3") + ["xnnpack_llm_qwen3_8da4w"]},
    "qwen3_5": {"fixtures": _llm("qwen3_5")},
    "qwen3_5_moe": {"fixtures": _llm("qwen3_5_moe"), "note": "its own `export.py` lowers to CUDA, Metal or MLX only; the fixtures are its architecture (Gated DeltaNet and gated attention, routed experts beside a shared one) through export_llama"},
    "resnet": {"zoo": ["tv_resnet18", "tv_resnet50"]},
    "silero_vad": {"zoo": ["et_silero_vad"]},
    "smollm2": {"fixtures": ["llama_dynamic"], "note": "a Llama; the real SmolLM2-135M in `examples/chat` (docs/chat.md)"},
    "smollm3": {"fixtures": ["llama_dynamic", "xnnpack_llama_dynamic"], "note": "SmolLM3's params.json keys through export_llama; " + IGNORED + " `no_rope_layer_interval`: the program is a plain Llama (`llm_smollm3` made and passed, not kept; docs/llm-families.md)"},
    "smolvlm": {"fixtures": ["llama_dynamic"], "why": "only `convert_weights.py`, mapping its SmolLM2 (Llama) text decoder for export_llama; the wheel has no export of its vision encoder"},
    "sortformer": {"why": "`export_sortformer.py` builds the model with NeMo from a downloaded checkpoint: `ModuleNotFoundError: No module named 'nemo'`"},
    "stable_diffusion": {"why": "`ImportError: Please install diffusers and transformers: pip install diffusers transformers` (diffusers is not in the pins; the model is loaded from the hub)"},
    "stable_diffusion_3_5_large": {"why": "`model.py` imports diffusers, which is not in the pins (`export_sd3_5_large.py`'s relative import fails on it, then its fallback with `ModuleNotFoundError: No module named 'model'`); the script writes `torch.export` archives (`.pt2`), not ExecuTorch programs"},
    "supertonic": {"why": "`export_supertonic.py` lowers to the MLX delegate only; " + MLX_ONLY},
    "test": {"why": "not a model: the wheel's test of exporting the models above"},
    "torchvision_vit": {"zoo": ["tv_vit_b_16"]},
    "toy_model": {"zoo": ["et_toy_mul", "et_toy_linear", "et_toy_add", "et_toy_add_mul", "et_toy_softmax", "et_toy_conv1d", "et_toy_sdpa"]},
    "voxtral_realtime": {"fixtures": ["voxtral_realtime", "xnnpack_voxtral_realtime", "voxtral_realtime_streaming", "xnnpack_voxtral_realtime_streaming"], "note": "`load_model` on a tiny synthetic Mistral checkpoint (params.json and safetensors under the checkpoint's names), then export_voxtral_rt.py's `export_all` and `lower_to_executorch` (portable and XNNPACK): the audio encoder, the text decoder over embeddings with its KV cache, the token embedding; the mel input bounded at 192 frames rather than 24,000 (whose plan holds 6.6 GB for the encoder's attention); and its streaming export (`--streaming`, `export_streaming`): an 8-frame encoder chunk a call with its convolutions' edges and attention in ring buffers (12 positions here), the decoder's caches rings of the sliding window, run past both"},
    "voxtral_tts": {"fixtures": ["voxtral_tts", "xnnpack_voxtral_tts", "voxtral_tts_codec", "xnnpack_voxtral_tts_codec"], "note": "`load_model` on a tiny synthetic Mistral checkpoint, then export_voxtral_tts.py's `export_model`, `export_codec_decoder` and `lower_to_executorch` (portable and XNNPACK): model.pte's text decoder (its KV cache in the buffer `share_mutable_buffers` shares between methods; only it holds state there; ptec hands such state between methods where several do), token and audio-token embeddings, semantic head and flow-matching velocity; codec_decoder.pte's codes-to-waveform decoder (weight-normed and transposed convolutions, ALiBi attention over a window)"},
    "wav2letter": {"zoo": ["et_wav2letter"]},
    "whisper": {"zoo": ["hf_whisper_encoder", "hf_whisper_decoder"], "note": "transformers' Whisper, which the wheel's class loads, encoder and decoder with its cache"},
    "yolo26": {"zoo": ["et_yolo26"]},
}


def example_rows(rows):
    """The examples/models table: one row per directory of the wheel."""
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    lines = ["| directory | covered by | result |", "|---|---|---|"]
    for name, e in sorted(EXAMPLES.items()):
        where = [f"zoo `{m}`" for m in e.get("zoo", [])] + [f"fixture `{f}`" for f in e.get("fixtures", [])]
        where += [e["where"]] if "where" in e else []
        result = [e["result"]] if "result" in e else []
        for m in e.get("zoo", []):
            got = by_model.get(m)
            if not got:
                result.append(f"`{m}`: not run")
                continue
            kinds = sorted({r["result"] + (f" ({r['reason']})" if r.get("reason") else "") for r in got})
            result.append(f"`{m}`: " + "; ".join(f"{k}" for k in kinds) + f" ({', '.join(r['lowering'] for r in got)})")
        if e.get("fixtures") and "why" not in e:
            result.append("pass (`cargo test`)")
        if "why" in e:
            result.append(("not exported: " if not e.get("fixtures") else "the architecture passes; the model itself is not exported: ") + e["why"])
        note = f" ({e['note']})" if e.get("note") else ""
        text = ("; ".join(result)).replace("|", "\\|")
        lines.append(f"| `{name}` | {', '.join(where) or 'none'}{note} | {text} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------


def check_versions():
    wrong = {}
    for pkg, want in PINNED.items():
        try:
            have = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != want:
            wrong[pkg] = have
    if wrong:
        sys.exit(f"zoo.py: pinned {PINNED}; this environment has {wrong}")


def build(make, inputs_of):
    """The model in eval mode, two inputs, eager outputs, tolerances and the
    outputs' largest magnitude."""
    torch.manual_seed(0)
    model = make().eval()
    g = torch.Generator().manual_seed(1)
    inputs = [inputs_of(g), inputs_of(g)]
    with torch.no_grad():
        outs = [as_tuple(model(*xs)) for xs in inputs]
    try:
        rtol, atol = exporting.tolerance(model, inputs, outs)
    except Exception as e:
        # A model that casts to float32 inside (RAFT) has no float64 copy:
        # it is checked at the strictest tolerance, which can only fail it
        # wrongly, never pass it wrongly.
        print(f"zoo.py: no float64 copy ({first_line(e)}); the strictest tolerance", file=sys.stderr)
        rtol, atol = exporting.RTOL, exporting.ATOL_LADDER[0]
    scale = exporting.output_scale(outs)
    # At least 1e-4 of the outputs' unit (1, or their scale when below it).
    atol = max(atol, 1e-4 * exporting.output_unit(outs))
    if atol > 1e-2 * scale:
        # A tolerance near the outputs' own size passes any result.
        raise ValueError(f"atol {atol:.3g} is more than 1% of the outputs' largest magnitude {scale:.3g}: no test")
    return model, inputs, outs, rtol, atol, scale


def as_tuple(out):
    out = out if isinstance(out, tuple) else (out,)
    return tuple(o.detach().contiguous().clone() for o in out)


def instructions(path):
    r = subprocess.run([str(exporting.PTEC), "inspect", "--json", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    doc = json.loads(r.stdout)
    program = doc.get("program", doc)
    return sum(sum(m.get("instruction_kinds", {}).values()) for m in program.get("methods", []))


def generation_ms(path):
    t = time.time()
    r = subprocess.run([str(exporting.PTEC), str(path), "-o", "/dev/null"], capture_output=True, text=True)
    return round((time.time() - t) * 1000) if r.returncode == 0 else None


def run(models, out_dir, log, per_model=False, progress=None):
    """Exports every model both ways into out_dir and checks the bundles:
    all at once, or (`per_model`) each model's as it is exported, its
    bundles deleted after (large models), with `progress(rows)` called
    after each. Returns one row per (model, lowering)."""
    rows, items = [], []
    for name, (make, inputs_of) in models.items():
        t = time.time()
        mine = []
        try:
            model, inputs, outs, rtol, atol, scale = build(make, inputs_of)
        except Exception as e:  # the zoo's or PyTorch's failure, not ptec's
            for lowering in ("portable", "xnnpack"):
                rows.append({"model": name, "lowering": lowering, "result": "not built", "reason": first_line(e)})
            log(f"{name}: not built: {first_line(e)}")
            continue
        for lowering in ("portable", "xnnpack"):
            row = {"model": name, "lowering": lowering, "rtol": rtol, "atol": atol, "scale": scale}
            rows.append(row)
            try:
                bundle, _ = exporting.lower_and_bundle(model, inputs, outs, lowering)
            except Exception as e:
                row.update(result="not exported", reason=first_line(e))
                log(f"{name} {lowering}: ExecuTorch did not export it: {row['reason']}")
                continue
            path = out_dir / f"{name}_{lowering}.bpte"
            path.write_bytes(bundle)
            row.update(file=path.name, bytes=len(bundle), instructions=instructions(path), gen_ms=generation_ms(path))
            mine.append((row, (path, rtol, atol)))
        log(f"{name}: exported in {time.time() - t:.0f} s")
        if per_model:
            t = time.time()
            check(mine, out_dir, log)
            for row, _ in mine:
                row["check_s"] = round(time.time() - t)
                (out_dir / row["file"]).unlink(missing_ok=True)
            if progress:
                progress(rows)
        else:
            items += mine
    if not per_model:
        check(items, out_dir, log)
    return rows


def check(items, out_dir, log):
    """Runs `ptec check` over the (row, item) pairs and records each
    result in its row."""
    t = time.time()
    results = exporting.ptec_check([item for _, item in items], log)
    log(f"checked {len(items)} bundles in {time.time() - t:.0f} s")
    for row, _ in items:
        status, detail = results[str(out_dir / row["file"])]
        row["result"] = {"pass": "pass", "refused": "refused", "mismatch": "mismatch"}.get(status, "crash")
        if status == "refused":
            # What ptec does not support, without the bundle's path.
            row["reason"] = exporting.refused_operator(detail) or first_line(detail.split(": ", 2)[-1])
        elif status != "pass":
            row["reason"] = first_line(detail)


def first_line(e):
    s = str(e).strip()
    s = s.splitlines()[0] if s else type(e).__name__
    return s[:240]


def table(rows):
    lines = [
        "| model | lowering | instructions | result | generation | build and check |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in rows:
        result = r["result"] + (f": {r['reason']}" if r.get("reason") else "")
        result = result.replace("|", "\\|")
        gen = f"{r['gen_ms']} ms" if r.get("gen_ms") is not None else ""
        chk = f"{r['check_s']} s" if r.get("check_s") is not None else ""
        lines.append(f"| {r['model']} | {r['lowering']} | {r.get('instructions') or ''} | {result} | {gen} | {chk} |")
    return "\n".join(lines)


def summary(rows):
    n = len(rows)
    counts = {k: sum(1 for r in rows if r["result"] == k) for k in ("pass", "mismatch", "refused", "crash", "not exported", "not built")}
    return f"{n} programs: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="every list, and write docs/model-coverage.md")
    ap.add_argument("--only", nargs="+", help="these models only")
    ap.add_argument("--commit", action="store_true", help="rewrite tests/zoo/default/ from the default list")
    ap.add_argument("--out", help="where the bundles go (default: a temporary directory)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="with --full: keep the models tests/zoo/coverage.json already has and run the rest (with --only: run those again)",
    )
    ap.add_argument("--report", action="store_true", help="only rewrite docs/model-coverage.md from tests/zoo/coverage.json")
    args = ap.parse_args()
    check_versions()
    if args.report:
        report(json.loads(COVERAGE.read_text())["rows"])
        return
    models = FULL if args.full else DEFAULT
    if args.only:
        unknown = set(args.only) - set(FULL)
        if unknown:
            sys.exit(f"zoo.py: no model {sorted(unknown)}")
        models = {k: FULL[k] for k in args.only}
    if not exporting.PTEC.exists():
        sys.exit(f"zoo.py: {exporting.PTEC} missing; run `cargo build --release -p ptec-cli`")

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    stamp = {"date": datetime.date.today().isoformat(), "ptec": ptec_commit(), "cpu": f"{cpu_name()}, {os_cpus()} CPUs"}
    earlier = []
    if args.resume:
        if not args.full:
            sys.exit("zoo.py: --resume goes with --full")
        saved = json.loads(COVERAGE.read_text()) if COVERAGE.exists() else {"versions": PINNED, "rows": []}
        if saved["versions"] != PINNED:
            sys.exit(f"zoo.py: {COVERAGE} was made with {saved['versions']}, not {PINNED}")
        if args.only:
            # Run these again, in place of their saved rows.
            earlier = [r for r in saved["rows"] if r["model"] in FULL and r["model"] not in models]
        else:
            earlier = [r for r in saved["rows"] if r["model"] in models]
            models = {k: v for k, v in models.items() if k not in {r["model"] for r in earlier}}
        log(f"resuming: {len({r['model'] for r in earlier})} models done, {len(models)} to run")

    def write_coverage(rows):
        """tests/zoo/coverage.json and docs/model-coverage.md from the rows
        so far (rewritten after each model, so that a run cut short leaves
        what it did and --resume can go on from there)."""
        rows = earlier + [dict(r, **stamp) for r in rows]
        COVERAGE.write_text(json.dumps({"versions": PINNED, "rows": rows}, indent=1) + "\n")
        report(rows)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.commit and DEFAULT_DIR or args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        before = []
        if args.commit:
            # With --only, the other models' entries stay.
            if args.only and (out / "manifest.json").exists():
                before = [p for p in json.loads((out / "manifest.json").read_text())["programs"] if p["model"] not in models]
            for f in out.glob("*.bpte"):
                if f.name not in {p["file"] for p in before}:
                    f.unlink()
        if args.full:
            rows = run(models, out, log, per_model=True, progress=write_coverage)
        else:
            rows = run(models, out, log)
        if args.commit:
            for r in rows:
                if r["result"] not in ("pass", "refused") and r.get("file"):
                    (out / r["file"]).unlink()
            kept = before + [
                {k: r[k] for k in ("file", "model", "lowering", "rtol", "atol", "result", "reason") if k in r}
                for r in rows
                if r.get("file") and r["result"] in ("pass", "refused")
            ]
            # In the default list's order, so that rewriting some models
            # leaves the others' entries where they were.
            place = {name: i for i, name in enumerate(DEFAULT)}
            kept.sort(key=lambda p: (place.get(p["model"], len(place)), p["lowering"]))
            doc = {"generator": "tests/zoo/zoo.py --commit", "versions": PINNED, "programs": kept}
            (out / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(table(rows))
    print(summary(rows))
    if args.full:
        write_coverage(rows)


def report(rows):
    """docs/model-coverage.md from the rows of --full runs."""
    order = list(FULL)
    rows = sorted(rows, key=lambda r: order.index(r["model"]) if r["model"] in order else len(order))
    done = len({r["model"] for r in rows})
    runs = {}
    for r in rows:
        runs.setdefault((r["date"], r["ptec"], r["cpu"]), set()).add(r["model"])
    doc = (
        "# Model coverage\n\n"
        f"Generated by `tests/zoo/zoo.py --full` ({', '.join(f'{k} {v}' for k, v in PINNED.items())}, ultralytics {ULTRALYTICS} for et_yolo26, torchsr {TORCHSR} for et_edsr): "
        f"{done} of {len(FULL)} models. "
        "Each model is built with seeded random weights, exported portably and through the XNNPACK "
        "partitioner, bundled with eager PyTorch's outputs on two inputs and checked with `ptec check` "
        "on one and two threads (the last column: building the generated code and running the cases). "
        "The tolerance comes from the distance between eager float32 and a float64 copy of the model "
        "(at least 1e-4, in units of the outputs' largest magnitude when that is below 1: untrained batch norms "
        "shrink some models' outputs to 1e-14); a model with no float64 copy (RAFT casts to float32 inside) is held to 1e-4, "
        "and one whose tolerance would exceed 1% of its outputs' magnitude is not built (no test). Inception v3's batch-norm "
        "statistics are measured on random inputs first (with the defaults its logits reach 2e9). "
        "`not built`: the model's constructor or PyTorch failed; `not exported`: ExecuTorch's exporter "
        "failed (neither counted against ptec).\n\n"
        "Left out, to keep a full run near two hours on a 2-core machine: VGG (133 M parameters) and "
        "Wide ResNet-50-2 (69 M), and the larger variants of the families listed (ResNet-34/101/152, "
        "EfficientNet-B1 to B7, ConvNeXt-S/B/L, ViT-L/H, Swin-S/B), which widen and deepen graphs "
        "already here. Torchvision's MViT and Swin3D, and ExecuTorch's Llama (see the LLM fixtures), "
        "are not in the lists.\n\n"
        "ExecuTorch's vision-language models are fixtures rather than zoo entries: LLaVA, the one whose "
        "multi-method export the wheel ships (`examples/models/llava`: image encoder, token embedding, "
        "text decoder), compiles portably and through XNNPACK and matches eager PyTorch and ExecuTorch's "
        "runtime method by method and over a whole turn; SmolVLM, InternVL3 and Llama 3.2 Vision do not "
        "export from the wheel's examples (see [llm-families.md](llm-families.md#vision-language-llava)).\n\n"
        "## ExecuTorch's examples/models\n\n"
        "Every directory of the pinned wheel's `executorch/examples/models`, where it is checked and how it "
        "fared, or why it is not exported (`compiler/cli/tests/model_coverage.rs` fails when one is missing). "
        "Fixtures are compiled and checked against ExecuTorch's runtime by `cargo test`; a family fixture "
        "named for a directory holding only `convert_weights.py` is a tiny random model with that family's "
        "`params.json` features, exported by `export_llama` (see [llm-families.md](llm-families.md)).\n\n"
        + example_rows(rows)
        + "\n\n## The zoo's runs\n\n"
        + "".join(f"- {len(m)} models on {d}, ptec {c}, {cpu}\n" for (d, c, cpu), m in runs.items())
        + earlier_rule(rows)
        + f"\n{summary(rows)}\n\n{table(rows)}\n"
    )
    (REPO / "docs" / "model-coverage.md").write_text(doc)


def earlier_rule(rows):
    """A line counting the models whose rows predate the tolerances in the
    outputs' unit (they record no output scale): their checks used the
    absolute floor of 1e-4."""
    old = sorted({r["model"] for r in rows if "scale" not in r and r.get("atol") is not None})
    if not old:
        return ""
    return (
        f"\n{len(old)} models were last run before the tolerance was measured in the outputs' unit "
        "(their rows record no output scale): their atol is at least 1e-4 absolute, whatever their "
        "outputs' size. `--full` checks them again under the present rule.\n"
    )


def ptec_commit():
    """The commit the compiler was built from, `-dirty` if its crates have
    changes (the harness's own do not count)."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    crates = ["compiler", "kernels", "runtime-min", "schema", "macros", "Cargo.lock"]
    dirty = subprocess.run(git + ["status", "--porcelain", "--"] + crates, capture_output=True, text=True).stdout.strip()
    return (head or "unknown") + ("-dirty" if dirty else "")


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def os_cpus():
    import os

    return os.cpu_count()


if __name__ == "__main__":
    main()
