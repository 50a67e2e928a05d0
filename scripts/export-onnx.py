#!/usr/bin/python3
"""Exports a torchvision model to ONNX as tessera-train --dry-run --model FILE.onnx reads it.

Usage: /usr/bin/python3 scripts/export-onnx.py MODEL OUT.onnx [--weights] [--eval] [--batch N] [--size S]

MODEL is a torchvision.models name (resnet50, wide_resnet50_2, ...), or bert-tiny, bert-base or
bert-large: BERT written in torch.nn as tessera's --model bert-* (--seq-len tokens). Debian's python3-torch 1.13 and
python3-torchvision import under /usr/bin/python3 (another python3 first on PATH may lack them).
By default the graph is exported for training (batch norms kept: training=TRAINING and no constant
folding) without its weights (export_params=False: the parameters stay declared inputs, a file of a
few hundred kilobytes); --weights writes them, --eval exports the inference graph, whose batch norms
PyTorch folds into the convolutions (a different network to train).
"""
import argparse
import sys

try:
    import torch
    import torchvision
except ImportError as e:  # the test that runs this skips on exit code 77
    print(f"export-onnx: {e} (Debian: apt-get install python3-torch python3-torchvision; run /usr/bin/python3)",
          file=sys.stderr)
    sys.exit(77)

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("out")
p.add_argument("--weights", action="store_true")
p.add_argument("--eval", action="store_true")
p.add_argument("--batch", type=int, default=1)
p.add_argument("--size", type=int, default=224)
p.add_argument("--classes", type=int, default=1000)
p.add_argument("--seq-len", type=int, default=128)
a = p.parse_args()



class Embeddings(torch.nn.Module):
    def __init__(self, vocab, positions, types, width, dropout):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab, width)
        self.position_embeddings = torch.nn.Embedding(positions, width)
        self.token_type_embeddings = torch.nn.Embedding(types, width)
        self.LayerNorm = torch.nn.LayerNorm(width, eps=1e-12)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, ids, types):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x))


class Block(torch.nn.Module):
    """A post-LN block with one fused QKV projection, as tessera's (nn::transformer_block)."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        nn = torch.nn
        self.heads, self.width = heads, width
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.ln_1, self.ln_2 = nn.LayerNorm(width, eps=1e-12), nn.LayerNorm(width, eps=1e-12)
        self.fc_in, self.fc_out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.drop_attention, self.drop_1, self.drop_2 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        n, t, d = x.shape[0], x.shape[1], self.width // self.heads
        q, k, v = self.qkv(x).split(self.width, dim=-1)
        q, k, v = (z.reshape(n, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        p = self.drop_attention(torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1))
        a = (p @ v).transpose(1, 2).reshape(n, t, self.width)
        x = self.ln_1(x + self.drop_1(self.proj(a)))
        return self.ln_2(x + self.drop_2(self.fc_out(torch.nn.functional.gelu(self.fc_in(x)))))


class Encoder(torch.nn.Module):
    def __init__(self, layers, width, heads, dropout):
        super().__init__()
        self.layer = torch.nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))

    def forward(self, x):
        for b in self.layer:
            x = b(x)
        return x


class Head(torch.nn.Module):
    """The masked-LM head: dense, erf GELU, layer norm, a decoder tied to the word embeddings."""

    def __init__(self, width, vocab):
        super().__init__()
        self.dense = torch.nn.Linear(width, width)
        self.LayerNorm = torch.nn.LayerNorm(width, eps=1e-12)
        self.bias = torch.nn.Parameter(torch.zeros(vocab))

    def forward(self, x, table):
        return self.LayerNorm(torch.nn.functional.gelu(self.dense(x))) @ table.t() + self.bias


class Bert(torch.nn.Module):
    """BERT (Devlin et al. 2019) in torch.nn as tessera's --model bert-* is built, its modules named as
    tessera names its units (embeddings, encoder.layer.N, cls)."""

    def __init__(self, layers, width, heads, vocab=30522, positions=512, types=2, dropout=0.1):
        super().__init__()
        self.embeddings = Embeddings(vocab, positions, types, width, dropout)
        self.encoder = Encoder(layers, width, heads, dropout)
        self.cls = Head(width, vocab)

    def forward(self, ids, types):
        return self.cls(self.encoder(self.embeddings(ids, types)), self.embeddings.word_embeddings.weight)


torch.manual_seed(0)
mode = torch.onnx.TrainingMode.EVAL if a.eval else torch.onnx.TrainingMode.TRAINING
bert = {"bert-tiny": (2, 128, 2, 256, 256), "bert-base": (12, 768, 12, 30522, 512), "bert-large": (24, 1024, 16, 30522, 512)}
if a.model in bert:
    layers, width, heads, vocab, positions = bert[a.model]
    model = Bert(layers, width, heads, vocab, positions)
    ids = torch.zeros(a.batch, a.seq_len, dtype=torch.int64)
    inputs, names, outputs = (ids, ids.clone()), ["input_ids", "token_type_ids"], ["logits"]
else:
    model = getattr(torchvision.models, a.model)(num_classes=a.classes)
    inputs, names, outputs = torch.zeros(a.batch, 3, a.size, a.size), ["images"], ["logits"]
model.train(not a.eval)
torch.onnx.export(model, inputs, a.out, export_params=a.weights, training=mode, do_constant_folding=a.eval,
                  input_names=names, output_names=outputs, opset_version=13)
print(f"export-onnx: {a.model} -> {a.out}")
