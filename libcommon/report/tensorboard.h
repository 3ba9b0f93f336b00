/* tensorboard.h: writing TensorBoard event files (what Megatron's SummaryWriter produces).
 *
 * One file per writer, <dir>/events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<n> (n counts
 * writers opened by this process, from 0). The file is a sequence of TFRecords (little-endian uint64
 * length, masked CRC32C of those 8 bytes, the data, masked CRC32C of the data), each holding a
 * serialized tensorflow Event: first {wall_time, file_version "brain.Event:2"}, then one Event per
 * value {wall_time, step, summary {value {tag, simple_value (float32)}}}; text values as the text plugin
 * writes them (tag "<tag>/text_summary", a DT_STRING tensor of shape [1]). Fields are encoded as
 * protobuf 3 does (fields in number order, zero step omitted), so files match the Python writer's.
 */
#ifndef MT_REPORT_TENSORBOARD_H
#define MT_REPORT_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Megatron's scalar tags (training_log, evaluate_and_print_results); "... vs samples" variants take
 * the consumed train samples as the step. Loss tags are the loss key itself ("lm loss"), then
 * "<key> validation" and "<key> validation ppl" (each also with " vs samples"). */
#define MT_TB_LEARNING_RATE "learning-rate"
#define MT_TB_BATCH_SIZE "batch-size"
#define MT_TB_LM_LOSS "lm loss"
#define MT_TB_LOSS_SCALE "loss-scale"
#define MT_TB_WORLD_SIZE "world-size"
#define MT_TB_GRAD_NORM "grad-norm"
#define MT_TB_NUM_ZEROS "num-zeros"
#define MT_TB_PARAMS_NORM "params-norm"
#define MT_TB_ITERATION_TIME "iteration-time"      /* seconds, with --log-timers-to-tensorboard */
#define MT_TB_THROUGHPUT "throughput"              /* TFLOP/s/GPU, --log-throughput + timers */
#define MT_TB_SKIPPED_TRAIN_SAMPLES "skipped-train-samples"
#define MT_TB_LM_LOSS_VALIDATION "lm loss validation"
#define MT_TB_LM_LOSS_VALIDATION_PPL "lm loss validation ppl"
#define MT_TB_VS_SAMPLES " vs samples"
/* mt's own: training tokens per second (all ranks together); Megatron has no such tag. */
#define MT_TB_TOKENS_PER_SEC "tokens-per-sec"

typedef struct mt_tb mt_tb;

/* Creates dir (and parents) and the event file, writes the file_version event. NULL on error. */
mt_tb *mt_tb_open(const char *dir, mt_err *e);
/* The event file's path. */
const char *mt_tb_path(const mt_tb *tb);

/* Appends a scalar event (value stored as float32) stamped with the current time. */
int mt_tb_add_scalar(mt_tb *tb, const char *tag, int64_t step, double value, mt_err *e);
/* The same with an explicit wall time (unix seconds). */
int mt_tb_add_scalar_at(mt_tb *tb, const char *tag, int64_t step, double value, double wall_time, mt_err *e);
/* Appends a text event, as SummaryWriter.add_text (Megatron writes every argument this way at start-up). */
int mt_tb_add_text(mt_tb *tb, const char *tag, int64_t step, const char *text, mt_err *e);

/* Events are buffered and written out at least every flush_secs (default 120, as SummaryWriter) when
 * the next one is added, and by mt_tb_flush / mt_tb_close. */
void mt_tb_set_flush_secs(mt_tb *tb, double secs);
int mt_tb_flush(mt_tb *tb, mt_err *e);
/* Flushes, closes and frees (tb may be NULL). Returns -1 if anything could not be written. */
int mt_tb_close(mt_tb *tb, mt_err *e);

/* The pieces, exposed for tests: CRC32C (Castagnoli, reflected 0x82F63B78) of n bytes continuing from
 * crc (0 to start), TFRecord's mask of it, and one TFRecord frame of data appended to out (n + 16 bytes). */
uint32_t mt_crc32c(uint32_t crc, const void *p, size_t n);
uint32_t mt_tfrecord_mask(uint32_t crc);
size_t mt_tfrecord_frame(const void *data, size_t n, unsigned char *out);
/* The serialized Event of a scalar (protobuf bytes, without framing) into out (at least 64 + strlen(tag)
 * bytes); returns its length. */
size_t mt_tb_encode_scalar(unsigned char *out, double wall_time, int64_t step, const char *tag, float value);

#endif
