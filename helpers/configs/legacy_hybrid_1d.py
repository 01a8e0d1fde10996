# A legacy Colossal-AI config.py with 1D (Megatron) tensor and pipeline parallelism, in the
# style of the old hybrid-parallel examples. BATCH_SIZE is per data-parallel rank, as it was
# in those examples. Parsed with ast by helpers.config.legacy, never executed.
from colossalai.legacy.amp import AMP_TYPE

BATCH_SIZE = 8
LEARNING_RATE = 3e-4
NUM_EPOCHS = 2
SEQ_LENGTH = 32 * 32
NUM_LAYERS = 24
HIDDEN_SIZE = 1024
NUM_HEADS = 16

parallel = dict(pipeline=2, tensor=dict(size=2, mode="1d"))
fp16 = dict(mode=AMP_TYPE.NAIVE)
clip_grad_norm = 1.0
NUM_MICRO_BATCHES = 4
