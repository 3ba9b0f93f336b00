/* ordered.h: a parallel map whose results come out in submission order.
 *
 * The caller owns n_items work items (batches). It takes a free one with mt_ordered_acquire(), fills it
 * and submits it; one of `workers` threads runs work(worker_state, item); an emitter thread calls
 * emit(user, item) strictly in submission order and then returns the item to the free list. Memory is
 * bounded by the items; a slow consumer blocks the producer. Used by mt-tokenize so that the output is
 * byte-identical whatever the worker count.
 */
#ifndef MT_UTIL_ORDERED_H
#define MT_UTIL_ORDERED_H

typedef void (*mt_work_fn)(void *worker_state, void *item);
/* Returns 0, or -1 to stop: later items are not emitted and mt_ordered_finish returns -1. */
typedef int (*mt_emit_fn)(void *user, void *item);

typedef struct mt_ordered mt_ordered;

/* worker_state[i] is passed to work() on worker i. items[0..n_items) are the caller's batches. */
mt_ordered *mt_ordered_new(int workers, void **worker_state, void **items, int n_items, mt_work_fn work,
                           mt_emit_fn emit, void *user);
/* Blocks until an item is free. Returns NULL if emitting has stopped with an error. */
void *mt_ordered_acquire(mt_ordered *o);
void mt_ordered_submit(mt_ordered *o, void *item);
/* Waits for all submitted items to be emitted, stops the threads, frees o. Returns 0 or -1 (emit failed). */
int mt_ordered_finish(mt_ordered *o);

#endif
