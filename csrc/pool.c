/* The engine's thread team (see pool.h). */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RELAX() _mm_pause()
#else
#define RELAX() ((void)0)
#endif

struct pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    atomic_uint gen;      /* bumped per job */
    atomic_int pending;   /* workers yet to finish the job */
    atomic_int sleepers;  /* workers asleep on start */
    atomic_int master_asleep;
    atomic_int quit;
    atomic_int calm;      /* waits left that sleep at once: a recent spin outlasted its budget */
    int spin_us;          /* how long a wait spins before it sleeps */
    pool_fn fn;
    void *arg;
    int njob;
};

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* COLIBRI_SPIN_US: ASCII digits only, at most POOL_SPIN_MAX_US (colibri/engine_threads.py reads it
 * the same way for the start-up note), else the default. */
static int spin_budget_us(void) {
    const char *s = getenv("COLIBRI_SPIN_US");
    if (!s || !*s || strlen(s) > 7) return POOL_SPIN_US;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return POOL_SPIN_US;
    const long v = strtol(s, NULL, 10);
    return v <= POOL_SPIN_MAX_US ? (int)v : POOL_SPIN_US;
}

/* Spin until ready(p, want) or the budget passes; 1 if it came true while spinning (0: the
 * caller sleeps). With `calms`, a spin that runs out makes the next POOL_CALM waits skip
 * spinning: only the caller's wait for its partners does that, as a partner that has not finished
 * its share in the budget was likely descheduled, while a worker's wait for the next job is long
 * between decode steps on an idle machine too. */
static int spin_until(pool *p, int (*ready)(pool *, unsigned), unsigned want, int calms, double budget) {
    if (p->spin_us <= 0) return ready(p, want);
    for (int c = atomic_load_explicit(&p->calm, memory_order_relaxed); c > 0;)
        if (atomic_compare_exchange_weak_explicit(&p->calm, &c, c - 1, memory_order_relaxed, memory_order_relaxed))
            return ready(p, want);
    const double t0 = now_us();
    for (int i = 0;; i++) {
        if (ready(p, want)) return 1;
        RELAX();
        if ((i & 63) == 63 && now_us() - t0 > budget) {
            if (calms) atomic_store_explicit(&p->calm, POOL_CALM, memory_order_relaxed);
            return ready(p, want);
        }
    }
}

/* Sequentially consistent loads: each sleeper sets its flag (sleepers, master_asleep) and then reads
 * the other side's counter, which sets its counter and then reads the flag; with acquire loads an
 * ARM CPU may let the read pass the flag's store, and both sides would miss each other. */
static int job_posted(pool *p, unsigned seen) { return atomic_load(&p->gen) != seen || atomic_load(&p->quit); }
static int job_done(pool *p, unsigned unused) { (void)unused; return atomic_load(&p->pending) == 0; }

typedef struct { pool *p; int tid; } worker_arg;

static void *worker(void *a) {
    pool *p = ((worker_arg *)a)->p;
    const int tid = ((worker_arg *)a)->tid;
    free(a);
    unsigned seen = 0;
    for (;;) {
        if (!spin_until(p, job_posted, seen, 0, p->spin_us)) {  /* a gap between jobs says nothing of the cores */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!job_posted(p, seen)) pthread_cond_wait(&p->start, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load(&p->gen);
        if (tid < p->njob) p->fn(p->arg, tid, p->njob);
        if (atomic_fetch_sub(&p->pending, 1) == 1
            && atomic_load(&p->master_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

pool *pool_new(int n) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = 1;  /* threads started so far, the caller's included: what pool_free joins */
    p->spin_us = spin_budget_us();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->th = calloc((size_t)(n > 1 ? n : 1), sizeof(pthread_t));
    if (!p->th) {
        pool_free(p);
        return NULL;
    }
    for (int i = 1; i < n; i++, p->n++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) break;
        a->p = p, a->tid = i;
        if (pthread_create(&p->th[i], NULL, worker, a) != 0) {
            free(a);
            break;
        }
    }
    if (p->n < n) {
        pool_free(p);
        return NULL;
    }
    return p;
}

void pool_free(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
}

int pool_size(const pool *p) { return p ? p->n : 1; }

int pool_cores(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void pool_run(pool *p, int n, pool_fn fn, void *arg) {
    if (!p || n <= 1 || p->n <= 1) {
        fn(arg, 0, 1);
        return;
    }
    if (n > p->n) n = p->n;
    p->fn = fn, p->arg = arg, p->njob = n;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
    }
    const double t0 = now_us();
    fn(arg, 0, n);
    /* The partners' shares are as large as the caller's: one still running after as long again
     * (or after the spin budget, if longer) was most likely descheduled. Capped, as past a few
     * hundred microseconds a wake-up (about 7 us) is a small price and a spinning caller holds a
     * core the late partner may be waiting for. */
    const double own = now_us() - t0, cap = (double)POOL_SPIN_CAP * p->spin_us;
    double budget = own > p->spin_us ? own : p->spin_us;
    if (budget > cap) budget = cap;
    if (!spin_until(p, job_done, 0, 1, budget)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->master_asleep, 1);
        while (!job_done(p, 0)) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->master_asleep, 0);
        pthread_mutex_unlock(&p->mu);
    }
}
