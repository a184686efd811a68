/*
 * The engine's thread team: pool_run(p, n, fn, arg) runs fn(arg, tid, n) on n threads (the caller
 * is tid 0) and returns when every one has finished. The engine's parallel loops (the matmuls'
 * output groups, a layer's attention) go through it.
 *
 * Why not OpenMP's team: libgomp either sleeps at once at every barrier (a wake-up per loop, about
 * 7 us on this project's VM, 150 loops a decode step) or spins for a count fixed when it loads,
 * which starves a descheduled partner when other work keeps the cores busy (BENCHMARKS.md, "Late
 * night"). Here a wait spins for up to POOL_SPIN_US microseconds (COLIBRI_SPIN_US overrides it; 0
 * always sleeps) and then sleeps; and once a spin has run out, the next POOL_CALM waits sleep at
 * once, so on busy cores the team waits as a passive one does.
 */
#ifndef COLIBRI_POOL_H
#define COLIBRI_POOL_H

#define POOL_SPIN_US 50
#define POOL_SPIN_MAX_US 1000000  /* the largest COLIBRI_SPIN_US read: about forever, for benchmarks */
#define POOL_CALM 64
/* The caller's wait for its partners spins at most this many spin budgets, however long its own
 * share took (see pool_run). */
#define POOL_SPIN_CAP 10

typedef void (*pool_fn)(void *arg, int tid, int n);
typedef struct pool pool;

/* A team of n_threads (the caller counts as one: n_threads - 1 are started); NULL if they could
 * not be. */
pool *pool_new(int n_threads);
void pool_free(pool *p);
/* fn(arg, tid, n) for tid 0..n-1, n capped at the team's size; a NULL team runs fn(arg, 0, 1). */
void pool_run(pool *p, int n, pool_fn fn, void *arg);
/* The team's threads, the caller's included; 1 for NULL. */
int pool_size(const pool *p);
/* Where thread tid of nt starts its share of n items (its share ends where tid + 1's starts):
 * contiguous shares within one item of each other, as OpenMP's static schedule makes them. */
static inline int pool_share(int n, int tid, int nt) { return (int)((long)tid * n / nt); }
/* The cores this process may run on (its affinity mask: taskset, a container's cpuset), at least 1:
 * the engine's default team size. */
int pool_cores(void);

#endif
