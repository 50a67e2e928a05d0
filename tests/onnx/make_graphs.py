#!/usr/bin/python3
"""Writes the small ONNX graphs tests/onnx checks, with python3-onnx's helper (Debian: python3-onnx).

Usage: /usr/bin/python3 tests/onnx/make_graphs.py [DIR]   (DIR: this script's folder)
The files are checked in; this script says how each was made. resnet50.onnx and resnet18_eval.onnx
come from scripts/export-onnx.py (torchvision, export_params=False): `resnet50` (the training graph)
and `resnet18 --eval` (the inference graph, its batch norms folded into the convolutions).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT


def save(name, nodes, inputs, outputs, initializers=(), opset=13):
    g = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    m = helper.make_model(g, producer_name="tessera-tests", opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(m, os.path.join(out, name + ".onnx"))


def weight(name, *dims):
    return numpy_helper.from_array(np.zeros(dims, dtype=np.float32), name)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


x = helper.make_tensor_value_info("x", F, [2, 3, 8, 8])
y = helper.make_tensor_value_info("y", F, [2, 5])

# Every CNN operator: a stem (Conv with a bias, BatchNormalization + Relu), a residual block (Conv,
# BatchNormalization, Add + Relu), pooling, and a head whose Reshape target is shape arithmetic
# (Shape, Gather, Unsqueeze, Concat) folded to a constant.
save("cnn_ops", [
    helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], name="/stem/conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c1", "bn.s", "bn.b", "bn.m", "bn.v"], ["b1"], name="/stem/bn/BatchNormalization"),
    helper.make_node("Relu", ["b1"], ["r1"], name="/stem/relu/Relu"),
    helper.make_node("Conv", ["r1", "c2.w"], ["c2"], name="/block/conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c2", "bn2.s", "bn2.b", "bn2.m", "bn2.v"], ["b2"], name="/block/bn/BatchNormalization"),
    helper.make_node("Add", ["b2", "r1"], ["a"], name="/block/Add"),
    helper.make_node("Relu", ["a"], ["r2"], name="/block/relu/Relu"),
    helper.make_node("MaxPool", ["r2"], ["p1"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("AveragePool", ["p1"], ["p2"], name="/avg/AveragePool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["p2"], ["r3"], name="/act/Relu"),
    helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="/gap/GlobalAveragePool"),
    helper.make_node("Shape", ["g"], ["s"], name="/head/Shape"),
    helper.make_node("Gather", ["s", "zero"], ["n"], name="/head/Gather", axis=0),
    helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="/head/Unsqueeze"),
    helper.make_node("Concat", ["n1", "minus1"], ["target"], name="/head/Concat", axis=0),
    helper.make_node("Reshape", ["g", "target"], ["f"], name="/head/Reshape"),
    helper.make_node("Identity", ["f"], ["f2"], name="/head/Identity"),
    helper.make_node("Gemm", ["f2", "fc.w", "fc.b"], ["y"], name="/fc/Gemm", transB=1),
], [x], [y], [weight("c1.w", 4, 3, 3, 3), weight("c1.b", 4), weight("bn.s", 4), weight("bn.b", 4), weight("bn.m", 4),
              weight("bn.v", 4), weight("c2.w", 4, 4, 3, 3), weight("bn2.s", 4), weight("bn2.b", 4), weight("bn2.m", 4),
              weight("bn2.v", 4), i64("zero", 0), i64("axes0", [0]), i64("minus1", [-1]), weight("fc.w", 5, 4),
              weight("fc.b", 5)])

# Transformer operators outside BERT's patterns (opset 17: LayerNormalization as one node): a layer
# norm, a MatMul with its bias, Tanh and a scale, Softmax, Slice and Concat, Sub of two activations,
# a MatMul of two activations, Dropout.
t = helper.make_tensor_value_info("t", F, [2, 4, 8])
save("transformer_ops", [
    helper.make_node("LayerNormalization", ["t", "ln.s", "ln.b"], ["ln"], name="/norm/LayerNormalization", axis=-1, epsilon=1e-5),
    helper.make_node("MatMul", ["ln", "w"], ["m"], name="/proj/MatMul"),
    helper.make_node("Add", ["b", "m"], ["lin"], name="/proj/Add"),
    helper.make_node("Tanh", ["lin"], ["th"], name="/act/Tanh"),
    helper.make_node("Mul", ["th", "half"], ["h"], name="/act/Mul"),
    helper.make_node("Softmax", ["h"], ["p"], name="/softmax/Softmax", axis=-1),
    helper.make_node("Slice", ["p", "s0", "s2", "ax1"], ["sl"], name="/pick/Slice"),
    helper.make_node("Concat", ["sl", "sl"], ["c"], name="/pick/Concat", axis=1),
    helper.make_node("Sub", ["c", "lin"], ["d"], name="/mix/Sub"),
    helper.make_node("Transpose", ["d"], ["dt"], name="/scores/Transpose", perm=[0, 2, 1]),
    helper.make_node("MatMul", ["d", "dt"], ["e"], name="/scores/MatMul"),
    helper.make_node("Dropout", ["e", "ratio"], ["y"], name="/drop/Dropout"),
], [t], [helper.make_tensor_value_info("y", F, [2, 4, 4])],
   [weight("ln.s", 8), weight("ln.b", 8), weight("w", 8, 8), weight("b", 8),
    numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"), i64("s0", [0]), i64("s2", [2]), i64("ax1", [1]),
    numpy_helper.from_array(np.array(0.1, dtype=np.float32), "ratio")], opset=17)

# An operator tessera does not read.
save("unsupported", [
    helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", kernel_shape=[1, 1]),
    helper.make_node("LRN", ["c"], ["y"], name="/norm/LRN", size=3),
], [x], [helper.make_tensor_value_info("y", F, [2, 4, 8, 8])], [weight("w", 4, 3, 1, 1)])

# A grouped convolution (ResNeXt's), which tessera lacks.
save("grouped", [
    helper.make_node("Conv", ["x", "w"], ["y"], name="/conv/Conv", kernel_shape=[1, 1], group=3),
], [x], [helper.make_tensor_value_info("y", F, [2, 3, 8, 8])], [weight("w", 3, 1, 1, 1)])

# A weight that declares 10^10 floats and holds four bytes.
big = TensorProto(name="w", data_type=F, dims=[100000, 100000], raw_data=b"\0\0\0\0")
save("declared_too_large", [
    helper.make_node("Conv", ["x", "w"], ["y"], name="/conv/Conv", kernel_shape=[1, 1]),
], [x], [helper.make_tensor_value_info("y", F, [2, 100000, 8, 8])], [big])

# A weight in an external file that holds 16 bytes of its 4 GB.
ext = TensorProto(name="w", data_type=F, dims=[1000, 1000, 1, 1000])
ext.data_location = TensorProto.EXTERNAL
for k, v in (("location", "external_small.bin"), ("offset", "0"), ("length", "4000000000")):
    e = ext.external_data.add()
    e.key, e.value = k, v
save("external_too_large", [
    helper.make_node("Conv", ["x", "w"], ["y"], name="/conv/Conv", kernel_shape=[1, 1]),
], [x], [helper.make_tensor_value_info("y", F, [2, 1000, 8, 8])], [ext])
with open(os.path.join(out, "external_small.bin"), "wb") as f:
    f.write(b"\0" * 16)

# A Reshape whose target is a graph input: known only at run time.
save("runtime_reshape", [
    helper.make_node("Reshape", ["x", "shape"], ["y"], name="/view/Reshape"),
], [x, helper.make_tensor_value_info("shape", TensorProto.INT64, [2])], [helper.make_tensor_value_info("y", F, [2, 192])])

# Opset 9, older than PyTorch 1.13's exports.
save("opset9", [helper.make_node("Relu", ["x"], ["y"], name="/relu/Relu")], [x],
     [helper.make_tensor_value_info("y", F, [2, 3, 8, 8])], opset=9)

# A file that is not a model, and one cut short: the first 20,000 bytes of resnet50.onnx.
with open(os.path.join(out, "not_a_model.onnx"), "w") as f:
    f.write("this is not an ONNX model\n")
with open(os.path.join(out, "resnet50.onnx"), "rb") as f:
    head = f.read(20000)
with open(os.path.join(out, "truncated.onnx"), "wb") as f:
    f.write(head)

print("make_graphs: wrote the test graphs to", out)
