# A legacy Colossal-AI config.py (colossalai.legacy, before the Booster API), as quoted by the
# source guide from examples/tutorial/sequence_parallel/config.py. Chapter 4 migrates it with
# helpers.config.legacy.migrate_legacy; it is parsed with ast, never imported or executed.
from colossalai.legacy.amp import AMP_TYPE

TRAIN_ITERS = 10
GLOBAL_BATCH_SIZE = 32  # dp world size x sentences per rank
SEQ_LENGTH = 128
DEPTH = 4
NUM_ATTENTION_HEADS = 4
HIDDEN_SIZE = 128

# pipeline config, only enabled when pipeline > 1
NUM_MICRO_BATCHES = 4

parallel = dict(pipeline=1, tensor=dict(size=2, mode="sequence"))
fp16 = dict(mode=AMP_TYPE.NAIVE, verbose=True)
gradient_handler = [dict(type="SequenceParallelGradientHandler")]
