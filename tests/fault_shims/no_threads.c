/* Fault injection for tests: preloaded into a process, pthread_create fails with EAGAIN (as under
 * a container's pids.max or RLIMIT_NPROC) while the file named by $FAIL_THREADS_FLAG exists. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  static create_fn real;
  const char *flag = getenv("FAIL_THREADS_FLAG");
  if (flag && access(flag, F_OK) == 0) return EAGAIN;
  if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
  return real(t, attr, fn, arg);
}
