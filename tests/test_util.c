// test_util.c: the small helpers of util.c that no other test reaches
// (st_env_switch, the reading of STRATA_* on/off switches).
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "util.h"

#define VAR "STRATA_TEST_SWITCH"

static void test_env_switch_values(void) {
    unsetenv(VAR);
    CHECK(st_env_switch(VAR, true) && !st_env_switch(VAR, false), "unset gives the default");
    setenv(VAR, "", 1);
    CHECK(st_env_switch(VAR, true) && !st_env_switch(VAR, false), "empty gives the default");
    setenv(VAR, "0", 1);
    CHECK(!st_env_switch(VAR, true) && !st_env_switch(VAR, false), "0 is off");
    setenv(VAR, "1", 1);
    CHECK(st_env_switch(VAR, true) && st_env_switch(VAR, false), "1 is on");
    unsetenv(VAR);
}

// Any other value keeps the default, and says so on stderr with the name and
// the value (read back from a file stderr is pointed at).
static void test_env_switch_bad_value(void) {
    static const char *const bad[] = {"off", "yes", "2", "01", " 1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv(VAR, bad[i], 1);
        char path[] = "/tmp/strata-test-util-XXXXXX";
        const int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        if (fd < 0) return;
        fflush(stderr);
        FILE *saved = fdopen(dup(fileno(stderr)), "w");
        dup2(fd, fileno(stderr));
        const bool on = st_env_switch(VAR, true), off = st_env_switch(VAR, false);
        fflush(stderr);
        dup2(fileno(saved), fileno(stderr));
        fclose(saved);
        char got[512] = {0};
        FILE *f = fopen(path, "r");
        const size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
        got[n] = 0;
        if (f) fclose(f);
        close(fd);
        unlink(path);
        char want[128];
        snprintf(want, sizeof want, "strata: %s=%s is not 0 or 1; ignored\n", VAR, bad[i]);
        CHECK(on && !off, "'%s' gives the default", bad[i]);
        CHECK(strstr(got, want) != NULL, "'%s': stderr said \"%s\", want \"%s\"", bad[i], got, want);
    }
    unsetenv(VAR);
}

int main(void) {
    RUN(test_env_switch_values);
    RUN(test_env_switch_bad_value);
    TEST_END();
}
