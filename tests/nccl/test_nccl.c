/* The NCCL C API of libchorus_nccl, from C (docs/nccl.md).
 *
 *   (a) ncclCommInitAll with 4 comms, ONE thread driving them all through
 *       groups: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, a
 *       Send/Recv ring shift, out of place and in place, every element
 *       checked (integer-valued data: sums are exact);
 *   (b) 4 pthreads, each ncclCommInitRank with one shared ncclGetUniqueId,
 *       AllReduce without groups; and one thread initialising 4 ranks in a
 *       group, as nccl-tests does;
 *   (c) error paths: bad arguments, an id from another process, a
 *       rendezvous a rank never joins, a mismatch inside a group, abort.
 *
 * Exits non-zero on the first failed check. */
#define _POSIX_C_SOURCE 200809L

#include <nccl.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define NR 4

static int failures = 0;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            ++failures;                                                    \
        }                                                                  \
    } while (0)

#define NCCL_OK(call)                                                                                 \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess) {                                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
                    ncclGetLastError(NULL));                                                          \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

static void* xmalloc(size_t n) {
    void* p = malloc(n == 0 ? 1 : n);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* ---------------------------------------------------------------- (a) */

static void test_single_thread_groups(void) {
    ncclComm_t comms[NR];
    const int devs[NR] = {3, 2, 1, 0};
    NCCL_OK(ncclCommInitAll(comms, NR, devs));
    for (int r = 0; r < NR; ++r) {
        int n = 0, rank = -1, dev = -1;
        NCCL_OK(ncclCommCount(comms[r], &n));
        NCCL_OK(ncclCommUserRank(comms[r], &rank));
        NCCL_OK(ncclCommCuDevice(comms[r], &dev));
        CHECK(n == NR && rank == r && dev == devs[r], "rank %d: count %d, rank %d, device %d", r, n, rank, dev);
        ncclResult_t async = ncclInternalError;
        NCCL_OK(ncclCommGetAsyncError(comms[r], &async));
        CHECK(async == ncclSuccess, "async error %d", (int)async);
    }

    const size_t count = 1001; /* not a multiple of the rank count */
    float* send[NR];
    float* recv[NR];
    for (int r = 0; r < NR; ++r) {
        send[r] = xmalloc(sizeof(float) * count * NR);
        recv[r] = xmalloc(sizeof(float) * count * NR);
    }

    for (int inplace = 0; inplace <= 1; ++inplace) {
        /* AllReduce, sum: rank r holds (r+1)*(i%7+1); the sum is 10*(i%7+1). */
        for (int r = 0; r < NR; ++r)
            for (size_t i = 0; i < count; ++i) {
                send[r][i] = (float)((r + 1) * (int)(i % 7 + 1));
                recv[r][i] = -1.0f;
            }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r)
            NCCL_OK(ncclAllReduce(send[r], inplace ? send[r] : recv[r], count, ncclFloat, ncclSum, comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r) {
            const float* out = inplace ? send[r] : recv[r];
            for (size_t i = 0; i < count; ++i)
                if (out[i] != (float)(10 * (int)(i % 7 + 1))) {
                    CHECK(0, "all_reduce inplace=%d rank %d [%zu] = %g", inplace, r, i, (double)out[i]);
                    break;
                }
        }

        /* AllGather: block q of every output is rank q's input, q*1000 + i. */
        for (int r = 0; r < NR; ++r) {
            for (size_t i = 0; i < count * NR; ++i) recv[r][i] = -1.0f;
            float* in = inplace ? recv[r] + (size_t)r * count : send[r];
            for (size_t i = 0; i < count; ++i) in[i] = (float)(r * 1000 + (int)i % 997);
        }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r)
            NCCL_OK(ncclAllGather(inplace ? recv[r] + (size_t)r * count : send[r], recv[r], count, ncclFloat,
                                  comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r)
            for (size_t j = 0; j < count * NR; ++j) {
                const size_t q = j / count, i = j % count;
                if (recv[r][j] != (float)((int)q * 1000 + (int)i % 997)) {
                    CHECK(0, "all_gather inplace=%d rank %d [%zu] = %g", inplace, r, j, (double)recv[r][j]);
                    break;
                }
            }

        /* ReduceScatter: input element j on rank r is (r+1)*(j%5+1); rank r
         * gets block r summed: 10*(j%5+1). */
        for (int r = 0; r < NR; ++r) {
            for (size_t j = 0; j < count * NR; ++j) send[r][j] = (float)((r + 1) * (int)(j % 5 + 1));
            for (size_t i = 0; i < count; ++i) recv[r][i] = -1.0f;
        }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r)
            NCCL_OK(ncclReduceScatter(send[r], inplace ? send[r] + (size_t)r * count : recv[r], count, ncclFloat,
                                      ncclSum, comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r) {
            const float* out = inplace ? send[r] + (size_t)r * count : recv[r];
            for (size_t i = 0; i < count; ++i) {
                const size_t j = (size_t)r * count + i;
                if (out[i] != (float)(10 * (int)(j % 5 + 1))) {
                    CHECK(0, "reduce_scatter inplace=%d rank %d [%zu] = %g", inplace, r, i, (double)out[i]);
                    break;
                }
            }
        }

        /* Broadcast from rank 2 (root's send differs from its recv out of place). */
        const int broot = 2;
        for (int r = 0; r < NR; ++r)
            for (size_t i = 0; i < count; ++i) {
                send[r][i] = (float)(r * 100000 + (int)i);
                recv[r][i] = -1.0f;
            }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r)
            NCCL_OK(ncclBroadcast(send[r], inplace ? send[r] : recv[r], count, ncclFloat, broot, comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r) {
            const float* out = inplace ? send[r] : recv[r];
            for (size_t i = 0; i < count; ++i)
                if (out[i] != (float)(broot * 100000 + (int)i)) {
                    CHECK(0, "broadcast inplace=%d rank %d [%zu] = %g", inplace, r, i, (double)out[i]);
                    break;
                }
        }

        /* Reduce to rank 1, max: rank r holds r*10 + i%3; the max is 30 + i%3.
         * Non-root receive buffers are NULL: NCCL never touches them. */
        const int rroot = 1;
        for (int r = 0; r < NR; ++r)
            for (size_t i = 0; i < count; ++i) {
                send[r][i] = (float)(r * 10 + (int)(i % 3));
                recv[r][i] = -1.0f;
            }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r) {
            void* out = r != rroot ? NULL : inplace ? (void*)send[r] : (void*)recv[r];
            NCCL_OK(ncclReduce(send[r], out, count, ncclFloat, ncclMax, rroot, comms[r], NULL));
        }
        NCCL_OK(ncclGroupEnd());
        {
            const float* out = inplace ? send[rroot] : recv[rroot];
            for (size_t i = 0; i < count; ++i)
                if (out[i] != (float)(30 + (int)(i % 3))) {
                    CHECK(0, "reduce inplace=%d [%zu] = %g", inplace, i, (double)out[i]);
                    break;
                }
        }
    }

    /* Send/Recv ring shift in one group (sendrecv_perf's pattern): rank r
     * sends to r+1 and receives from r-1; every rank's send blocks until
     * received, so this deadlocks unless the group orders them well. */
    for (int round = 0; round < 3; ++round) {
        for (int r = 0; r < NR; ++r)
            for (size_t i = 0; i < count; ++i) {
                send[r][i] = (float)(r * 7 + round + (int)i);
                recv[r][i] = -1.0f;
            }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r) {
            NCCL_OK(ncclSend(send[r], count, ncclFloat, (r + 1) % NR, comms[r], NULL));
            NCCL_OK(ncclRecv(recv[r], count, ncclFloat, (r - 1 + NR) % NR, comms[r], NULL));
        }
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r) {
            const int from = (r - 1 + NR) % NR;
            for (size_t i = 0; i < count; ++i)
                if (recv[r][i] != (float)(from * 7 + round + (int)i)) {
                    CHECK(0, "sendrecv round %d rank %d [%zu] = %g", round, r, i, (double)recv[r][i]);
                    break;
                }
        }
    }

    /* All-to-all by Send/Recv in one group, the rank itself included
     * (nccl-tests' alltoall pattern): block q of rank r's output is block r
     * of rank q's input. */
    {
        const size_t m = 13;
        for (int r = 0; r < NR; ++r)
            for (size_t j = 0; j < m * NR; ++j) {
                send[r][j] = (float)(r * 1000 + (int)j);
                recv[r][j] = -1.0f;
            }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r)
            for (int q = 0; q < NR; ++q) {
                NCCL_OK(ncclSend(send[r] + (size_t)q * m, m, ncclFloat, q, comms[r], NULL));
                NCCL_OK(ncclRecv(recv[r] + (size_t)q * m, m, ncclFloat, q, comms[r], NULL));
            }
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r)
            for (size_t j = 0; j < m * NR; ++j) {
                const size_t q = j / m, i = j % m;
                if (recv[r][j] != (float)((int)q * 1000 + r * (int)m + (int)i)) {
                    CHECK(0, "alltoall rank %d [%zu] = %g", r, j, (double)recv[r][j]);
                    break;
                }
            }
    }

    /* Other types and operators; groups nest (only the outer end runs). */
    {
        int32_t* a[NR];
        double* b[NR];
        for (int r = 0; r < NR; ++r) {
            a[r] = xmalloc(sizeof(int32_t) * count);
            b[r] = xmalloc(sizeof(double) * count);
            for (size_t i = 0; i < count; ++i) {
                a[r][i] = (int32_t)((i % 2) + 1) * (r % 2 == 0 ? 1 : -1); /* product: sign and 2^k */
                b[r][i] = (double)(r + (int)i);
            }
        }
        NCCL_OK(ncclGroupStart());
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r) NCCL_OK(ncclAllReduce(a[r], a[r], count, ncclInt32, ncclProd, comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r) NCCL_OK(ncclAllReduce(b[r], b[r], count, ncclFloat64, ncclAvg, comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r)
            for (size_t i = 0; i < count; ++i) {
                const int32_t p = (i % 2) ? 16 : 1; /* (+-1 or +-2)^4 with two negative factors */
                const double avg = (0.0 + 1.0 + 2.0 + 3.0) / NR + (double)i;
                if (a[r][i] != p || b[r][i] != avg) {
                    CHECK(0, "prod/avg rank %d [%zu] = %d, %g", r, i, (int)a[r][i], b[r][i]);
                    break;
                }
            }
        for (int r = 0; r < NR; ++r) {
            free(a[r]);
            free(b[r]);
        }
    }

    /* Half precision moves (AllGather) but does not reduce on the host path. */
    {
        uint16_t* h[NR];
        for (int r = 0; r < NR; ++r) {
            h[r] = xmalloc(sizeof(uint16_t) * NR * 3);
            for (int i = 0; i < 3; ++i) h[r][r * 3 + i] = (uint16_t)(0x3c00 + r * 3 + i);
        }
        NCCL_OK(ncclGroupStart());
        for (int r = 0; r < NR; ++r) NCCL_OK(ncclAllGather(h[r] + r * 3, h[r], 3, ncclFloat16, comms[r], NULL));
        NCCL_OK(ncclGroupEnd());
        for (int r = 0; r < NR; ++r)
            for (int j = 0; j < NR * 3; ++j) CHECK(h[r][j] == (uint16_t)(0x3c00 + j), "half all_gather rank %d [%d]", r, j);
        const ncclResult_t e = ncclAllReduce(h[0], h[0], 3, ncclFloat16, ncclSum, comms[0], NULL);
        CHECK(e == ncclInvalidArgument, "half all_reduce gave %d", (int)e);
        CHECK(strstr(ncclGetLastError(comms[0]), "ncclFloat16") != NULL, "text: %s", ncclGetLastError(comms[0]));
        for (int r = 0; r < NR; ++r) free(h[r]);
    }

    for (int r = 0; r < NR; ++r) {
        free(send[r]);
        free(recv[r]);
        NCCL_OK(ncclCommDestroy(comms[r]));
    }
}

/* ---------------------------------------------------------------- (b) */

struct rank_args {
    ncclUniqueId id;
    int rank;
    int ok;
};

static void* rank_main(void* p) {
    struct rank_args* a = p;
    ncclComm_t comm = NULL;
    if (ncclCommInitRank(&comm, NR, a->id, a->rank) != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", a->rank, ncclGetLastError(NULL));
        return NULL;
    }
    const size_t count = 4099;
    int64_t* buf = xmalloc(sizeof(int64_t) * count);
    int64_t* out = xmalloc(sizeof(int64_t) * count);
    int good = 1;
    for (int iter = 0; iter < 5 && good; ++iter) {
        for (size_t i = 0; i < count; ++i) buf[i] = (int64_t)(a->rank + 1) * (int64_t)(i + iter);
        /* No group: the call completes before it returns. */
        if (ncclAllReduce(buf, out, count, ncclInt64, ncclSum, comm, NULL) != ncclSuccess) {
            fprintf(stderr, "rank %d: ncclAllReduce: %s\n", a->rank, ncclGetLastError(comm));
            good = 0;
            break;
        }
        for (size_t i = 0; i < count; ++i)
            if (out[i] != 10 * (int64_t)(i + iter)) {
                fprintf(stderr, "rank %d iter %d [%zu] = %lld\n", a->rank, iter, i, (long long)out[i]);
                good = 0;
                break;
            }
    }
    free(buf);
    free(out);
    if (ncclCommDestroy(comm) != ncclSuccess) good = 0;
    a->ok = good;
    return NULL;
}

static void test_threads_init_rank(void) {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id)); /* "rank 0" makes it; every thread gets a copy */
    pthread_t t[NR];
    struct rank_args args[NR];
    for (int r = 0; r < NR; ++r) {
        args[r].id = id;
        args[r].rank = r;
        args[r].ok = 0;
        CHECK(pthread_create(&t[r], NULL, rank_main, &args[r]) == 0, "pthread_create");
    }
    for (int r = 0; r < NR; ++r) {
        pthread_join(t[r], NULL);
        CHECK(args[r].ok, "rank %d failed", r);
    }

    /* One thread, four ranks: grouped ncclCommInitRank completes at ncclGroupEnd. */
    ncclComm_t comms[NR];
    NCCL_OK(ncclGetUniqueId(&id));
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < NR; ++r) NCCL_OK(ncclCommInitRank(&comms[r], NR, id, r));
    NCCL_OK(ncclGroupEnd());
    uint8_t v[NR][5];
    for (int r = 0; r < NR; ++r) memset(v[r], r + 1, sizeof v[r]);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < NR; ++r) NCCL_OK(ncclAllReduce(v[r], v[r], 5, ncclUint8, ncclSum, comms[r], NULL));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < NR; ++r) {
        int dev = -1;
        NCCL_OK(ncclCommCuDevice(comms[r], &dev));
        CHECK(dev == r, "InitRank device %d", dev);
        for (int i = 0; i < 5; ++i) CHECK(v[r][i] == 10, "uint8 sum rank %d [%d] = %d", r, i, v[r][i]);
        NCCL_OK(ncclCommDestroy(comms[r]));
    }
}

/* ---------------------------------------------------------------- (c) */

static int expect(ncclResult_t got, ncclResult_t want, const char* what, const char* needle) {
    const char* text = ncclGetLastError(NULL);
    int ok = got == want && text != NULL && text[0] != '\0' && (needle == NULL || strstr(text, needle) != NULL);
    if (!ok)
        fprintf(stderr, "FAIL %s: got %d (%s), want %d; last error: '%s' (expected to contain '%s')\n", what,
                (int)got, ncclGetErrorString(got), (int)want, text ? text : "(null)", needle ? needle : "");
    else
        printf("  %-34s -> %s: %s\n", what, ncclGetErrorString(got), text);
    return ok;
}

/* Before any thread exists (fork then stays simple): an id used by another process. */
static void test_id_from_other_process(void) {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        ncclComm_t c = NULL;
        const ncclResult_t r = ncclCommInitRank(&c, 2, id, 1);
        const int ok = expect(r, ncclInvalidUsage, "id from another process", "another process") && c == NULL;
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child's ncclCommInitRank with the parent's id");
}

static void test_errors(void) {
    int v = 0;
    NCCL_OK(ncclGetVersion(&v));
    CHECK(v == NCCL_VERSION_CODE, "version %d", v);
    for (int r = 0; r <= (int)ncclInProgress; ++r) {
        const char* s = ncclGetErrorString((ncclResult_t)r);
        CHECK(s != NULL && s[0] != '\0', "ncclGetErrorString(%d)", r);
    }

    ncclComm_t comms[2];
    NCCL_OK(ncclCommInitAll(comms, 2, NULL));
    float x[8] = {0};
    int ok = 1;
    ok &= expect(ncclAllReduce(x, x, 8, (ncclDataType_t)99, ncclSum, comms[0], NULL), ncclInvalidArgument,
                 "bad datatype", "datatype");
    ok &= expect(ncclAllReduce(x, x, 8, ncclFloat, (ncclRedOp_t)42, comms[0], NULL), ncclInvalidArgument, "bad op",
                 "op");
    ok &= expect(ncclAllReduce(x, x, 8, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument, "NULL comm", "comm");
    ok &= expect(ncclAllReduce(x, x, SIZE_MAX, ncclFloat, ncclSum, comms[0], NULL), ncclInvalidArgument,
                 "count overflow", "count");
    ok &= expect(ncclAllGather(x, x, SIZE_MAX / 8, ncclFloat, comms[0], NULL), ncclInvalidArgument,
                 "sendcount x ranks overflow", "sendcount");
    ok &= expect(ncclAllReduce(NULL, x, 8, ncclFloat, ncclSum, comms[0], NULL), ncclInvalidArgument,
                 "NULL sendbuff", "sendbuff");
    ok &= expect(ncclBroadcast(x, x, 8, ncclFloat, 2, comms[0], NULL), ncclInvalidArgument, "bad root", "root");
    ok &= expect(ncclSend(x, 8, ncclFloat, -1, comms[0], NULL), ncclInvalidArgument, "bad peer", "peer");
    ok &= expect(ncclSend(x, 8, ncclFloat, 0, comms[0], NULL), ncclInvalidUsage, "send to self outside a group",
                 "itself");
    ok &= expect(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd without start", "ncclGroupStart");
    ok &= expect(ncclCommCount(comms[0], NULL), ncclInvalidArgument, "NULL count", "count");
    ncclUniqueId junk;
    memset(&junk, 0x5a, sizeof junk);
    ncclComm_t c = NULL;
    ok &= expect(ncclCommInitRank(&c, 2, junk, 0), ncclInvalidArgument, "foreign id", "commId");
    ok &= expect(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument, "InitAll ndev 0", "ndev");

    /* A call of a group fails: ncclGroupEnd runs none of it and says so. */
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(x, x, 8, ncclFloat, ncclSum, comms[0], NULL));
    (void)ncclAllReduce(x, x, 8, (ncclDataType_t)77, ncclSum, comms[1], NULL);
    ok &= expect(ncclGroupEnd(), ncclInvalidArgument, "group with a bad call", "none ran");

    /* The communicators still work after rejected calls. */
    float y[2][8];
    for (int r = 0; r < 2; ++r)
        for (int i = 0; i < 8; ++i) y[r][i] = (float)(r + i);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < 2; ++r) NCCL_OK(ncclAllReduce(y[r], y[r], 8, ncclFloat, ncclSum, comms[r], NULL));
    NCCL_OK(ncclGroupEnd());
    for (int i = 0; i < 8; ++i) CHECK(y[0][i] == (float)(1 + 2 * i) && y[1][i] == y[0][i], "after errors [%d]", i);

    /* Ranks that disagree inside a group: the group fails, every rank's
     * communicator reports it asynchronously, nothing hangs. */
    float z[2][16] = {{0}};
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(z[0], z[0], 16, ncclFloat, ncclSum, comms[0], NULL));
    NCCL_OK(ncclAllReduce(z[1], z[1], 15, ncclFloat, ncclSum, comms[1], NULL));
    const ncclResult_t mm = ncclGroupEnd();
    ok &= expect(mm, ncclInvalidUsage, "ranks disagree in a group", NULL);
    for (int r = 0; r < 2; ++r) {
        ncclResult_t async = ncclSuccess;
        NCCL_OK(ncclCommGetAsyncError(comms[r], &async));
        CHECK(async != ncclSuccess, "rank %d async error after the mismatch", r);
    }
    NCCL_OK(ncclCommDestroy(comms[0]));
    NCCL_OK(ncclCommDestroy(comms[1]));

    /* ncclCommAbort releases the peers: their async error says so. */
    NCCL_OK(ncclCommInitAll(comms, 2, NULL));
    NCCL_OK(ncclCommAbort(comms[0]));
    ncclResult_t async = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(comms[1], &async));
    CHECK(async == ncclRemoteError, "peer of an aborted rank: async %d", (int)async);
    ok &= expect(ncclAllReduce(x, x, 8, ncclFloat, ncclSum, comms[1], NULL), ncclRemoteError,
                 "call on a comm a peer aborted", "ncclCommAbort");
    NCCL_OK(ncclCommDestroy(comms[1]));

    /* A rank that never joins: the rendezvous fails at its deadline, never hangs. */
    setenv("CHORUS_TIMEOUT_MS", "300", 1);
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    ok &= expect(ncclCommInitRank(&c, 2, id, 0), ncclInvalidUsage, "rank 1 never joins", "missing rank 1");
    CHECK(c == NULL, "comm left set after a failed init");
    unsetenv("CHORUS_TIMEOUT_MS");

    CHECK(ok, "error paths");
}

int main(void) {
    printf("error paths:\n");
    test_id_from_other_process();
    test_single_thread_groups();
    test_threads_init_rank();
    test_errors();
    if (failures != 0) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("OK\n");
    return 0;
}
