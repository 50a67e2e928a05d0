#!/usr/bin/python3
"""Exports a torchvision model to ONNX as tessera-train --dry-run --model FILE.onnx reads it.

Usage: /usr/bin/python3 scripts/export-onnx.py MODEL OUT.onnx [--weights] [--eval] [--batch N] [--size S]

MODEL is a torchvision.models name (resnet50, wide_resnet50_2, ...). Debian's python3-torch 1.13 and
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
a = p.parse_args()

torch.manual_seed(0)
model = getattr(torchvision.models, a.model)(num_classes=a.classes)
model.train(not a.eval)
x = torch.zeros(a.batch, 3, a.size, a.size)
mode = torch.onnx.TrainingMode.EVAL if a.eval else torch.onnx.TrainingMode.TRAINING
torch.onnx.export(model, x, a.out, export_params=a.weights, training=mode, do_constant_folding=a.eval,
                  input_names=["images"], output_names=["logits"], opset_version=13)
print(f"export-onnx: {a.model} -> {a.out}")
