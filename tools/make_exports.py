#!/usr/bin/python3
"""Real-world style exported models for tests/exports/, with the framework's outputs.

usage: make_exports.py [OUTDIR] [--only NAME[,NAME...]]

Needs PyTorch and torchvision (Debian 12: python3-torch 1.13, python3-torchvision
0.14) besides numpy and onnx; the tests do not: they read what this script
writes (OUTDIR, default tests/exports next to this tools/ folder):

  OUTDIR/NAME/model.onnx           exported with torch.onnx.export (dynamic axes) or,
                                   for paddle_style_*, written with onnx.helper
  OUTDIR/NAME/CASE.in.INPUT.npy    an input of case CASE (two cases per model at
                                   different dynamic shapes)
  OUTDIR/NAME/CASE.out.OUTPUT.npy  PyTorch's output for it (numpy's, for the
                                   hand-written Paddle2ONNX-style models)
  OUTDIR/NAME/cases.json           {"cases": [{"name", "inputs": {NAME: FILE},
                                   "outputs": {NAME: FILE}}], "note": ...}

Models (each at opsets 9, 11, 13 and 17 where the exporter supports them):
  transformer   nn.TransformerEncoder (d_model 64, 4 heads, 2 layers, GELU) over
                nn.Embedding of int64 token ids, sinusoidal positions sliced to
                the sequence length, LayerNorm, mean over the sequence, Linear
  gpt           a GPT-style decoder block: token + position embeddings (positions
                from torch.arange), causal mask built in the graph (torch.triu
                at opset >= 14, arange comparison below), masked_fill -> Where,
                softmax attention, GELU MLP, tied LM head
  gpt2_hf       Hugging Face GPT-2 style attention: causal mask sliced out of a
                registered bool buffer with starts/ends from shapes, torch.where
  resnet18      torchvision ResNet-18 with widths 4-8-16-32, eval mode (the
                exporter folds BatchNorm into Conv; resnet18_bn keeps it with
                do_constant_folding=False and training=PRESERVE)
  mobilenetv2   torchvision MobileNetV2 (width 0.5, shortened setting, 128-wide
                head): depthwise convs, ReLU6 -> Clip, flatten as a
                reshape to (N, -1) (Shape/Gather/Unsqueeze/Concat/Reshape)
  unet2d        a small UNet-2D: nn.Upsample(scale 2) nearest and bilinear,
                skip concatenations (opsets 9 and 11; dynamic H, W).  At opset 9
                the exporter writes Upsample(mode=linear), whose ONNX meaning
                (asymmetric coordinates) is not PyTorch's bilinear (half_pixel):
                the reference output is the model computed with the ONNX
                meaning; cases.json records how far PyTorch's own output is
  paddle_style  Paddle2ONNX-style graph at opsets 9, 10 and 11: Reshape with shape
                from Shape/Slice/Concat, Squeeze/Unsqueeze with axes attributes,
                Clip min/max attributes, Upsample with scales, Split with split
                attribute, Pad with pads attribute
"""
import json
import math
import os
import sys
import warnings
import zlib

import numpy as np

import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "exports")
MAX_BYTES = 1536 * 1024

# ---- PyTorch models -----------------------------------------------------------------


def torch_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision

    class Transformer(nn.Module):
        def __init__(self, vocab=100, d=64, heads=4, layers=2, classes=10, max_len=64, gather_pos=False):
            super().__init__()
            self.gather_pos = gather_pos
            self.emb = nn.Embedding(vocab, d)
            pos = torch.arange(max_len).unsqueeze(1)
            div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
            pe = torch.zeros(max_len, d)
            pe[:, 0::2] = torch.sin(pos * div)
            pe[:, 1::2] = torch.cos(pos * div)
            self.register_buffer("pe", pe)
            layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=128, dropout=0.0, activation="gelu",
                                               batch_first=True)
            self.enc = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
            self.head = nn.Linear(d, classes)
            self.scale = math.sqrt(d)

        def forward(self, tokens, attention_mask=None):
            if self.gather_pos:  # opset 9 has no Slice with run-time ends
                pe = self.pe[torch.arange(tokens.shape[1], device=tokens.device)]
            else:
                pe = self.pe[: tokens.shape[1]]
            x = self.emb(tokens) * self.scale + pe
            if attention_mask is None:
                x = self.enc(x)
                return self.head(x.mean(dim=1)), x
            # BERT style: padding positions (mask 0) are not attended to nor pooled
            x = self.enc(x, src_key_padding_mask=attention_mask == 0)
            m = attention_mask.unsqueeze(-1).to(x.dtype)
            return self.head((x * m).sum(dim=1) / m.sum(dim=1)), x * m

    class GPTBlock(nn.Module):
        def __init__(self, vocab=96, d=64, heads=4, max_len=64, triu=False):
            super().__init__()
            self.heads, self.triu = heads, triu
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)
            self.lnf = nn.LayerNorm(d)

        def forward(self, tokens):
            b, t = tokens.shape
            pos = torch.arange(t, device=tokens.device)
            x = self.tok(tokens) + self.pos(pos.unsqueeze(0).expand(b, -1))  # Expand to [b, t]
            h = self.ln1(x)
            q, k, v = self.qkv(h).split(h.shape[-1], dim=2)
            d = h.shape[-1] // self.heads
            q = q.view(b, t, self.heads, d).transpose(1, 2)
            k = k.view(b, t, self.heads, d).transpose(1, 2)
            v = v.view(b, t, self.heads, d).transpose(1, 2)
            att = q @ k.transpose(-2, -1) / math.sqrt(d)
            if self.triu:
                mask = torch.triu(torch.ones(t, t, device=tokens.device), diagonal=1).bool()
            else:
                mask = pos.unsqueeze(0) > pos.unsqueeze(1)
            att = att.masked_fill(mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, -1)
            x = x + self.proj(y)
            x = x + self.fc2(F.gelu(self.fc(self.ln2(x))))
            return self.lnf(x) @ self.tok.weight.t()

    class GPT2Style(nn.Module):
        """Hugging Face GPT-2's attention: a causal mask sliced out of a registered
        bool buffer (bias[:, :, ns - nd:ns, :ns], a Slice with starts and ends
        from shapes), torch.where with a tensor fill value, view/permute chains
        built from x.size(), input_ids.view(-1, input_shape[-1])."""
        def __init__(self, vocab=50, d=32, heads=4, max_len=128):
            super().__init__()
            self.heads = heads
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
                                 .view(1, 1, max_len, max_len))
            self.register_buffer("masked_bias", torch.tensor(-1e4))

        def split_heads(self, z):
            return z.view(z.size()[:-1] + (self.heads, z.size(-1) // self.heads)).permute(0, 2, 1, 3)

        def forward(self, input_ids):
            shape = input_ids.size()
            ids = input_ids.view(-1, shape[-1])
            pos = torch.arange(0, shape[-1], dtype=torch.long, device=ids.device).unsqueeze(0).view(-1, shape[-1])
            x = self.wte(ids) + self.wpe(pos)
            q, k, v = self.c_attn(self.ln1(x)).split(x.size(-1), dim=2)
            q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
            w = torch.matmul(q, k.transpose(-1, -2)) / (float(v.size(-1)) ** 0.5)
            nd, ns = w.size(-2), w.size(-1)
            w = torch.where(self.bias[:, :, ns - nd:ns, :ns], w, self.masked_bias.to(w.dtype))
            a = torch.matmul(nn.Softmax(dim=-1)(w), v).permute(0, 2, 1, 3).contiguous()
            x = x + self.c_proj(a.view(a.size()[:-2] + (a.size(-2) * a.size(-1),)))
            return self.ln2(x).view(shape + (x.size(-1),))

    def resnet18_small():
        from torchvision.models.resnet import BasicBlock, ResNet
        m = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)
        widths = [4, 8, 16, 32]
        m.inplanes = 4
        m.conv1 = nn.Conv2d(3, 4, kernel_size=7, stride=2, padding=3, bias=False)
        m.bn1 = nn.BatchNorm2d(4)
        m.layer1 = m._make_layer(BasicBlock, widths[0], 2)
        m.layer2 = m._make_layer(BasicBlock, widths[1], 2, stride=2)
        m.layer3 = m._make_layer(BasicBlock, widths[2], 2, stride=2)
        m.layer4 = m._make_layer(BasicBlock, widths[3], 2, stride=2)
        m.fc = nn.Linear(widths[3], 10)
        return m

    def mobilenetv2_small():
        from torchvision.models.mobilenetv2 import MobileNetV2
        from torchvision.ops.misc import Conv2dNormActivation
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2], [6, 64, 2, 2], [6, 96, 1, 1]]
        class Net(MobileNetV2):
            def _forward_impl(self, x):  # flatten as x.reshape(N, -1): a Shape->Gather->Reshape chain
                x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
                return self.classifier(x.reshape(x.shape[0], -1))
        m = Net(num_classes=10, width_mult=0.5, inverted_residual_setting=setting)
        cin = m.features[-1][0].in_channels
        m.features[-1] = Conv2dNormActivation(cin, 128, kernel_size=1, activation_layer=nn.ReLU6)
        m.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, 10))
        return m

    def interp_onnx9(x, size, mode):
        """Upsample as ONNX Upsample-9 / Resize-10 define it and ONNX Runtime computes
        it: scale = float32(size) / float32(dim) (what the exporter's graph
        computes), source = out / scale in float32, edge clamped, nearest by
        truncation.  PyTorch's own bilinear (align_corners=False) is half_pixel
        and its nearest uses dim / size: the exporter warns at opset < 11."""
        for axis, out in zip((2, 3), size):
            n = x.shape[axis]
            scale = torch.tensor(float(out), dtype=torch.float32) / torch.tensor(float(n), dtype=torch.float32)
            src = torch.arange(out, dtype=torch.float32) / scale
            if mode == "nearest":
                x = x.index_select(axis, torch.clamp(src.floor().long(), max=n - 1))
                continue
            src = torch.clamp(src, max=n - 1)
            i0 = src.floor().long()
            i1 = torch.clamp(i0 + 1, max=n - 1)
            w = (src - i0).to(x.dtype).reshape([-1 if d == axis else 1 for d in range(4)])
            x = x.index_select(axis, i0) * (1 - w) + x.index_select(axis, i1) * w
        return x

    class UNet2D(nn.Module):
        def __init__(self, c=8, sized=False):
            super().__init__()
            self.onnx9_semantics = False
            self.sized = sized  # upsample to the skip's size: sizes from Shape -> Slice -> Concat

            def block(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
            self.e1, self.e2, self.e3 = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
            self.pool = nn.MaxPool2d(2)
            self.up_near = nn.Upsample(scale_factor=2, mode="nearest")
            self.up_lin = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.d2, self.d1 = block(6 * c, 2 * c), block(3 * c, c)
            self.out = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(self.pool(a))
            c = self.e3(self.pool(b))
            if self.sized:  # odd H, W: the pooled sizes round down, the skip's size is the target
                if self.onnx9_semantics:
                    up = interp_onnx9(c, b.shape[2:], "nearest")
                else:
                    up = F.interpolate(c, size=b.shape[2:], mode="nearest")
                d = self.d2(torch.cat([up, b], dim=1))
                if self.onnx9_semantics:
                    up = interp_onnx9(d, a.shape[2:], "linear")
                else:
                    up = F.interpolate(d, size=a.shape[2:], mode="bilinear", align_corners=False)
                return torch.sigmoid(self.out(self.d1(torch.cat([up, a], dim=1))))
            d = self.d2(torch.cat([self.up_near(c), b], dim=1))
            if self.onnx9_semantics:
                up = interp_onnx9(d, [2 * k for k in d.shape[2:]], "linear")
            else:
                up = self.up_lin(d)
            e = self.d1(torch.cat([up, a], dim=1))
            return torch.sigmoid(self.out(e))

    return torch, {
        "transformer": Transformer,
        "gpt": GPTBlock,
        "gpt2_hf": GPT2Style,
        "resnet18": resnet18_small,
        "mobilenetv2": mobilenetv2_small,
        "unet2d": UNet2D,
    }


def init_weights(torch, model, seed):
    """Non-trivial BatchNorm statistics and affine terms, so folding them matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)


def torch_specs():
    """(folder, builder key, ctor kwargs, opsets, input specs, export options)."""
    tok = {"name": "tokens", "kind": "tokens", "axes": {0: "batch", 1: "seq"}}
    img = {"name": "image", "kind": "image", "axes": {0: "batch"}}
    img_hw = {"name": "image", "kind": "image", "axes": {0: "batch", 2: "height", 3: "width"}}
    specs = []
    for op in (9, 11, 13, 17):
        specs.append(("transformer_op%d" % op, "transformer", {"gather_pos": op < 10}, op, [tok], ["logits", "hidden"],
                      [[(1, 7)], [(3, 24)]], {}))
        specs.append(("gpt_op%d" % op, "gpt", {"triu": op >= 14}, op, [dict(tok, vocab=96)], ["logits"],
                      [[(1, 7)], [(3, 24)]], {}))
        specs.append(("resnet18_op%d" % op, "resnet18", {}, op, [img_hw], ["logits"],
                      [[(1, 3, 32, 32)], [(3, 3, 48, 40)]], {}))
        specs.append(("mobilenetv2_op%d" % op, "mobilenetv2", {}, op, [img if op == 9 else img_hw], ["logits"],
                      [[(1, 3, 32, 32)], [(3, 3, 32, 32) if op == 9 else (2, 3, 48, 40)]], {}))
    for op in (11, 13, 17):
        specs.append(("gpt2_hf_op%d" % op, "gpt2_hf", {}, op, [dict(tok, name="input_ids", vocab=50)], ["hidden"],
                      [[(1, 9)], [(4, 21)]], {}))
    for op in (10,):
        specs.append(("transformer_op%d" % op, "transformer", {}, op, [tok], ["logits", "hidden"],
                      [[(1, 7)], [(3, 24)]], {}))
        specs.append(("gpt_op%d" % op, "gpt", {}, op, [dict(tok, vocab=96)], ["logits"],
                      [[(1, 7)], [(3, 24)]], {}))
    for op in (11, 17):
        specs.append(("gpt_nofold_op%d" % op, "gpt", {"triu": op >= 14}, op, [dict(tok, vocab=96)], ["logits"],
                      [[(1, 7)], [(3, 24)]], {"no_fold": True}))
    specs.append(("transformer_nofold_op13", "transformer", {}, 13, [tok], ["logits", "hidden"],
                  [[(1, 7)], [(3, 24)]], {"no_fold": True}))
    mask = {"name": "attention_mask", "kind": "mask", "axes": {0: "batch", 1: "seq"}}
    for op in (11, 17):
        specs.append(("bert_mask_op%d" % op, "transformer", {}, op, [tok, mask], ["logits", "hidden"],
                      [[(2, 7), (2, 7)], [(3, 24), (3, 24)]], {"inits_as_inputs": op == 11}))
    specs.append(("resnet18_bn_op11", "resnet18", {}, 11, [img_hw], ["logits"],
                  [[(1, 3, 32, 32)], [(2, 3, 40, 48)]], {"keep_bn": True}))
    for op in (9, 10, 11):
        specs.append(("unet2d_op%d" % op, "unet2d", {}, op, [img_hw], ["mask"],
                      [[(1, 3, 16, 16)], [(2, 3, 24, 32)]], {"onnx9_upsample": op < 11}))
    for op in (9, 11, 13):
        specs.append(("unet2d_sized_op%d" % op, "unet2d", {"sized": True}, op, [img_hw], ["mask"],
                      [[(1, 3, 17, 15)], [(2, 3, 22, 31)]], {"onnx9_upsample": op < 11}))
    return specs


def make_input(torch, spec, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if spec["kind"] == "mask":  # 1 then 0 (padding) from a random length >= 1 per row
        lens = torch.randint(1, shape[1] + 1, (shape[0], 1), generator=g)
        return (torch.arange(shape[1]).unsqueeze(0) < lens).to(torch.int64)
    if spec["kind"] == "tokens":
        return torch.randint(0, spec.get("vocab", 100), shape, generator=g, dtype=torch.int64)
    return torch.randn(shape, generator=g)


def export_torch(folder, key, kwargs, opset, ins, outs, cases, opts, torch, builders, seed):
    torch.manual_seed(seed)
    model = builders[key](**kwargs)
    init_weights(torch, model, seed)
    model.eval()
    path = os.path.join(OUT, folder)
    os.makedirs(path, exist_ok=True)
    args = tuple(make_input(torch, s, shp, seed) for s, shp in zip(ins, cases[0]))
    axes = {s["name"]: s["axes"] for s in ins}
    extra = {}
    if opts.get("keep_bn"):
        extra = {"do_constant_folding": False, "training": torch.onnx.TrainingMode.PRESERVE}
    if opts.get("no_fold"):  # the exporter leaves all shape arithmetic to the runtime
        extra = {"do_constant_folding": False}
    if opts.get("inits_as_inputs"):  # older exporters' default: every weight also a graph input
        extra["keep_initializers_as_inputs"] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, os.path.join(path, "model.onnx"), opset_version=opset,
                          input_names=[s["name"] for s in ins], output_names=outs, dynamic_axes=axes, **extra)
    onnx.checker.check_model(onnx.load(os.path.join(path, "model.onnx")))
    meta = []
    for ci, shapes in enumerate(cases):
        name = "c%d_%s" % (ci, "_".join("x".join(str(d) for d in s) for s in shapes))
        xs = [make_input(torch, s, shp, seed + 100 + ci) for s, shp in zip(ins, shapes)]
        with torch.no_grad():
            ys = model(*xs)
            if opts.get("onnx9_upsample"):  # the reference is the graph's meaning, not PyTorch's
                model.onnx9_semantics = True
                ys_torch, ys = ys, model(*xs)
                model.onnx9_semantics = False
        ys = ys if isinstance(ys, tuple) else (ys,)
        meta.append(save_case(path, name, {s["name"]: x.numpy() for s, x in zip(ins, xs)},
                              {o: y.numpy() for o, y in zip(outs, ys)}))
        if opts.get("onnx9_upsample"):
            diff = float((ys_torch - ys[0]).abs().max())
            meta[-1]["torch_vs_onnx9_max_abs_diff"] = diff
    return meta


def save_case(path, name, ins, outs):
    case = {"name": name, "inputs": {}, "outputs": {}}
    for kind, arrs in (("in", ins), ("out", outs)):
        for k, a in arrs.items():
            f = "%s.%s.%s.npy" % (name, kind, k)
            np.save(os.path.join(path, f), np.ascontiguousarray(a))
            case["inputs" if kind == "in" else "outputs"][k] = f
    return case


# ---- Paddle2ONNX-style model, written by hand -----------------------------------------

def paddle_weights(rng):
    c, co = 4, 6
    return {
        "conv_w": rng.standard_normal((co, c, 3, 3)).astype(np.float32) * 0.3,
        "conv_b": rng.standard_normal(co).astype(np.float32) * 0.1,
        "bn_scale": (rng.random(co) * 0.5 + 0.75).astype(np.float32),
        "bn_bias": (rng.standard_normal(co) * 0.1).astype(np.float32),
        "bn_mean": (rng.standard_normal(co) * 0.1).astype(np.float32),
        "bn_var": (rng.random(co) * 0.5 + 0.75).astype(np.float32),
        "fc": rng.standard_normal((3 * 2, 5)).astype(np.float32) * 0.5,
        "head_w": rng.standard_normal((3, co)).astype(np.float32) * 0.5,  # Gemm transB=1: [out, in]
        "head_b": rng.standard_normal(3).astype(np.float32) * 0.1,
    }


def topo_sorted(nodes, known):
    """The nodes in an order where each comes after its inputs' producers."""
    out, known, rest = [], set(known), list(nodes)
    while rest:
        ready = [n for n in rest if all(i in known for i in n.input if i)]
        if not ready:
            raise ValueError("cycle or undefined input")
        for n in ready:
            out.append(n)
            known.update(n.output)
            rest.remove(n)
    return out


def paddle_style(opset, wts):
    """The op forms Paddle2ONNX writes at opsets 9 to 11.  x [N, 4, H, W] ->
    Conv -> BatchNormalization -> Clip (min/max attributes below 11) ->
    Upsample x2 nearest (opset 9: Upsample with a scales input; 10: Resize(X,
    scales); 11: Resize(X, roi, scales) asymmetric/floor) -> Pad (pads
    attribute below 11) -> Split (split attribute) -> ReduceMean, Squeeze and
    Unsqueeze (axes attributes) -> Mul -> Transpose -> Reshape to [N, -1, 2]
    whose shape is Concat(Slice(Shape(.)), Constant) -> Concat -> MatMul ->
    ReduceMax = output y; and a head: GlobalAveragePool -> Reshape to
    [Cast(Gather(Shape, 0)) unsqueezed, -1] -> Gemm(transB=1) -> Softmax =
    output prob."""
    const = helper.make_node("Constant", [], ["tail"],
                             value=numpy_helper.from_array(np.array([-1, 2], np.int64)))
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c0"], pads=[1, 1, 1, 1], kernel_shape=[3, 3],
                         strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("BatchNormalization", ["c0", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["c1"],
                         epsilon=1e-5, momentum=0.9),
    ]
    inits = dict(wts)
    inits["scales"] = np.array([1, 1, 2, 2], np.float32)
    if opset < 11:
        nodes.append(helper.make_node("Clip", ["c1"], ["c2"], min=0.0, max=6.0))
        nodes.append(helper.make_node("Pad", ["up"], ["pd"], pads=[0, 0, 1, 0, 0, 0, 0, 1], mode="constant",
                                      value=0.5))
    else:
        nodes.append(helper.make_node("Clip", ["c1", "clip_min", "clip_max"], ["c2"]))
        nodes.append(helper.make_node("Pad", ["up", "pads", "pad_value"], ["pd"], mode="constant"))
        inits.update(clip_min=np.array(0.0, np.float32), clip_max=np.array(6.0, np.float32),
                     pads=np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64), pad_value=np.array(0.5, np.float32))
    if opset == 9:
        nodes.append(helper.make_node("Upsample", ["c2", "scales"], ["up"], mode="nearest"))
        nodes.append(helper.make_node("Slice", ["shp"], ["n"], starts=[0], ends=[1], axes=[0]))
    else:
        if opset == 10:
            nodes.append(helper.make_node("Resize", ["c2", "scales"], ["up"], mode="nearest"))
        else:
            nodes.append(helper.make_node("Resize", ["c2", "roi", "scales"], ["up"], mode="nearest",
                                          coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
            inits["roi"] = np.array([], np.float32)
        nodes.append(helper.make_node("Slice", ["shp", "st0", "en1", "ax0"], ["n"]))
        inits.update(st0=np.array([0], np.int64), en1=np.array([1], np.int64), ax0=np.array([0], np.int64))
    nodes += [
        helper.make_node("Split", ["pd"], ["s1", "s2"], axis=1, split=[2, 4]),
        helper.make_node("ReduceMean", ["s2"], ["m1"], axes=[1], keepdims=1),
        helper.make_node("Squeeze", ["m1"], ["sq"], axes=[1]),
        helper.make_node("Unsqueeze", ["sq"], ["us"], axes=[1]),
        helper.make_node("Mul", ["s1", "us"], ["mix"]),
        helper.make_node("Transpose", ["mix"], ["tr"], perm=[0, 2, 3, 1]),
        helper.make_node("Shape", ["tr"], ["shp"]),
        const,
        helper.make_node("Concat", ["n", "tail"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["tr", "newshape"], ["flat"]),
        helper.make_node("Concat", ["flat", "flat", "flat"], ["flat3"], axis=2),
        helper.make_node("MatMul", ["flat3", "fc"], ["mm"]),
        helper.make_node("ReduceMax", ["mm"], ["y"], axes=[1], keepdims=0),
        # head: batch size from Shape -> Gather -> Cast(int32) -> Cast(int64) -> Unsqueeze
        helper.make_node("GlobalAveragePool", ["c2"], ["gap"]),
        helper.make_node("Shape", ["gap"], ["gshp"]),
        helper.make_node("Gather", ["gshp", "zero"], ["nb"], axis=0),
        helper.make_node("Cast", ["nb"], ["nb32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["nb32"], ["nb64"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["nb64"], ["nb1"], axes=[0]),
        helper.make_node("Concat", ["nb1", "minus1"], ["hshape"], axis=0),
        helper.make_node("Reshape", ["gap", "hshape"], ["feat"]),
        helper.make_node("Gemm", ["feat", "head_w", "head_b"], ["logits"], alpha=1.0, beta=1.0, transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
    ]
    inits.update(zero=np.array(0, np.int64), minus1=np.array([-1], np.int64))
    nodes = topo_sorted(nodes, {"x"} | set(inits))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5]),
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 3])]
    g = helper.make_graph(nodes, "paddle_style", [x], outs,
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="PaddlePaddle")
    m.ir_version = 6
    onnx.checker.check_model(m)
    return m


def paddle_ref(x, w):
    """numpy (float64): what paddle_style's graph computes."""
    n, c, h, wd = x.shape
    x = x.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c0 = np.zeros((n, w["conv_w"].shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            c0 += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w["conv_w"][:, :, i, j])
    c0 += w["conv_b"][None, :, None, None]
    bc = (lambda v: v.astype(np.float64)[None, :, None, None])
    c1 = (c0 - bc(w["bn_mean"])) / np.sqrt(bc(w["bn_var"]) + 1e-5) * bc(w["bn_scale"]) + bc(w["bn_bias"])
    c2 = np.clip(c1, 0.0, 6.0)
    up = c2.repeat(2, axis=2).repeat(2, axis=3)
    pd = np.pad(up, ((0, 0), (0, 0), (1, 0), (0, 1)), constant_values=0.5)  # ONNX pads: begins, then ends
    s1, s2 = pd[:, :2], pd[:, 2:]
    tr = (s1 * s2.mean(axis=1, keepdims=True)).transpose(0, 2, 3, 1)
    flat = tr.reshape(n, -1, 2)
    y = (np.concatenate([flat, flat, flat], axis=2) @ w["fc"]).max(axis=1)
    logits = c2.mean(axis=(2, 3)) @ w["head_w"].T + w["head_b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return y.astype(np.float32), (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def export_paddle(opset, seed):
    rng = np.random.default_rng(seed)
    folder = "paddle_style_op%d" % opset
    path = os.path.join(OUT, folder)
    os.makedirs(path, exist_ok=True)
    w = paddle_weights(rng)
    onnx.save(paddle_style(opset, w), os.path.join(path, "model.onnx"))
    meta = []
    for ci, shp in enumerate([(1, 4, 6, 5), (3, 4, 9, 12)]):
        x = rng.standard_normal(shp).astype(np.float32) * 2
        y, prob = paddle_ref(x, w)
        name = "c%d_%s" % (ci, "x".join(str(d) for d in shp))
        meta.append(save_case(path, name, {"x": x}, {"y": y, "prob": prob}))
    return folder, meta


def write_meta(folder, meta, note):
    with open(os.path.join(OUT, folder, "cases.json"), "w") as f:
        json.dump({"cases": meta, "note": note}, f, indent=1)
    size = os.path.getsize(os.path.join(OUT, folder, "model.onnx"))
    if size > MAX_BYTES:
        raise SystemExit("%s: model.onnx is %d bytes, more than %d" % (folder, size, MAX_BYTES))
    print("%-22s %7d bytes, %d cases" % (folder, size, len(meta)))


def main():
    global OUT
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = set(args[i + 1].split(","))
        del args[i:i + 2]
    if args:
        OUT = args[0]
    torch, builders = torch_models()
    torch.set_num_threads(1)
    for folder, key, kw, op, ins, outs, cases, opts in torch_specs():
        if only and folder not in only and key not in only:
            continue
        try:  # seeded by the folder's name: regenerating one model leaves the others alone
            seed = zlib.crc32(folder.encode()) % 100000
            meta = export_torch(folder, key, kw, op, ins, outs, cases, opts, torch, builders, seed)
        except Exception as e:  # the exporter refuses some ops at some opsets
            print("%-22s not exported: %s" % (folder, str(e).splitlines()[0][:200]))
            continue
        write_meta(folder, meta, "PyTorch %s torch.onnx.export, opset %d" % (torch.__version__, op))
    for op in (9, 10, 11):
        if only and "paddle_style" not in only and "paddle_style_op%d" % op not in only:
            continue
        folder, meta = export_paddle(op, 77 + op)
        write_meta(folder, meta, "hand-written Paddle2ONNX style, opset %d; reference computed with numpy" % op)


if __name__ == "__main__":
    main()
