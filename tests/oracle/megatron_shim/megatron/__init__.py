# The piece of Megatron-LM that transformers' checkpoint_reshaping_and_interoperability.py imports
# (--megatron-path) to convert toward Megatron: the vocabulary padding, as Megatron defines it.
