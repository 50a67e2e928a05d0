#pragma once
// The data layer: dataset concepts, the Fashion-MNIST, CIFAR-10, synthetic and in-memory datasets,
// text (a corpus of documents, byte tokens, windows of tokens), normalisation and augmentation, and
// data_loader.
#include "tessera/data/augment.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/byte_tokenizer.hpp"
#include "tessera/data/cifar10.hpp"
#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"
#include "tessera/data/fashion_mnist.hpp"
#include "tessera/data/gzip.hpp"
#include "tessera/data/idx.hpp"
#include "tessera/data/in_memory.hpp"
#include "tessera/data/iterable_view.hpp"
#include "tessera/data/loader.hpp"
#include "tessera/data/make_loader.hpp"
#include "tessera/data/micro_batches.hpp"
#include "tessera/data/normalize.hpp"
#include "tessera/data/random.hpp"
#include "tessera/data/sampler.hpp"
#include "tessera/data/synthetic.hpp"
#include "tessera/data/text_corpus.hpp"
#include "tessera/data/token_windows.hpp"
