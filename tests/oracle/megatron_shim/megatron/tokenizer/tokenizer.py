# Megatron's vocabulary padding: the smallest multiple of make_vocab_size_divisible_by times the
# tensor-parallel size that holds the tokenizer's vocabulary.
def _vocab_size_with_padding(orig_vocab_size, args):
    multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    return -(-orig_vocab_size // multiple) * multiple
