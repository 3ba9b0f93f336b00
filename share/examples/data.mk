# data.mk: prepares several corpora for one training run with make: each corpus is tokenized
# (mt-tokenize) and indexed (mt-index) on its own, then the blend of all of them gets its sample
# indices (mt-shuffle), so that make -j runs the corpora side by side and, when one corpus, a program,
# the vocabulary or the schedule changes, only what depends on it runs again.
#   make -j2 -f share/examples/data.mk                     # from a directory holding corpora/*.jsonl.zst
#   make -f share/examples/data.mk SCHEDULE="..." WEIGHT_code=3
#   make -s -f share/examples/data.mk data-path            # the blend, for mt-train --data-path
# Files, relative to the directory make runs in:
#   corpora/NAME.jsonl.zst                 a corpus: JSON lines, plain or zstd (CORPORA: which ones)
#   data/tok/NAME.toks                     its token stream (man mt-formats)
#   data/NAME_content_document.bin/.idx    its Megatron dataset
#   data/cache/*.npy                       the blend's document, sample, shuffle and blending indices,
#                                          where mt-train --data-cache-path data/cache finds them;
#                                          data/cache/shuffle.log is mt-shuffle's report
# Each corpus weighs WEIGHT_NAME in the blend (default 1). SCHEDULE holds mt-shuffle's flags that
# must be those of the mt-train run (split, sequence length, iterations, batch, evaluation, seed); the
# indices are built again when it changes (data/cache/shuffle.args keeps the last one).

TOP       := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))../..)
BIN       ?= $(TOP)/build/bin
VOCAB     ?= $(TOP)/share/gpt2
CORPUS_DIR ?= corpora
DATA      ?= data
CACHE     ?= $(DATA)/cache
JSON_KEY  ?= content
WORKERS   ?= 2
CORPORA   ?= $(patsubst $(CORPUS_DIR)/%.jsonl.zst,%,$(wildcard $(CORPUS_DIR)/*.jsonl.zst))
SCHEDULE  ?= --split 969,30,1 --seq-length 1024 --train-iters 1000 --global-batch-size 8 \
             --eval-interval 100 --eval-iters 10 --seed 1234

TOKENIZE  := $(BIN)/mt-tokenize --vocab-file $(VOCAB)/vocab.json --merge-file $(VOCAB)/merges.txt
dataset    = $(DATA)/$(1)_$(JSON_KEY)_document
BLEND     := $(foreach c,$(CORPORA),$(or $(WEIGHT_$(c)),1) $(call dataset,$(c)))
SHUFFLE_ARGS := --data-path $(strip $(BLEND)) $(strip $(SCHEDULE)) --data-cache-path $(CACHE)

.PHONY: all tokenize index shuffle data-path clean
.DELETE_ON_ERROR:
.SECONDARY:
all: shuffle
tokenize: $(CORPORA:%=$(DATA)/tok/%.toks)
index: $(foreach c,$(CORPORA),$(call dataset,$(c)).idx)
shuffle: $(CACHE)/shuffle.log

ifeq ($(strip $(CORPORA)),)
$(error data.mk: no corpora: put NAME.jsonl.zst files in $(CORPUS_DIR)/ or set CORPORA)
endif

# The schedule is a file only when it changed, so that a new one (and nothing else) builds the indices again.
ifeq ($(filter data-path clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(CACHE) && { printf '%s\n' '$(SHUFFLE_ARGS)' | cmp -s - $(CACHE)/shuffle.args || \
    printf '%s\n' '$(SHUFFLE_ARGS)' > $(CACHE)/shuffle.args; })
endif

# corpus -> token stream
$(DATA)/tok/%.toks: $(CORPUS_DIR)/%.jsonl.zst $(BIN)/mt-tokenize $(VOCAB)/vocab.json $(VOCAB)/merges.txt
	@mkdir -p $(@D)
	$(TOKENIZE) --json-keys $(JSON_KEY) --append-eod --workers $(WORKERS) --quiet $< > $@.tmp
	mv $@.tmp $@

# token stream -> Megatron dataset (mt-index writes the .bin and the .idx together, or neither)
$(DATA)/%_$(JSON_KEY)_document.idx: $(DATA)/tok/%.toks $(BIN)/mt-index
	$(BIN)/mt-index --output-prefix $(DATA)/$* $<

# datasets -> the blend's sample indices (only the .idx files are read)
$(CACHE)/shuffle.log: $(foreach c,$(CORPORA),$(call dataset,$(c)).idx) $(BIN)/mt-shuffle $(CACHE)/shuffle.args
	$(BIN)/mt-shuffle $(SHUFFLE_ARGS) 2> $@.tmp || { cat $@.tmp >&2; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

# the blend as mt-train's --data-path takes it: weight and prefix of each corpus
data-path:
	@echo $(strip $(BLEND))

clean:
	rm -rf $(DATA)/tok $(CACHE) $(foreach c,$(CORPORA),$(call dataset,$(c)).bin $(call dataset,$(c)).idx)
