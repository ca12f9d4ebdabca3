/* The time of a hold-log line, in C (see gate/holds.py: stamp).
 *
 * Every line of the hold log has one.  Python's repr of an arbitrary
 * float was its costliest single step in the job-manager's thread; the
 * gate keeps times to the microsecond, whose text is six decimals with
 * trailing zeros stripped.  Compiled into epilog-gate.so in front of
 * fastpath.c, and on its own by the tests, with GATE_STAMP_MIN and
 * GATE_STAMP_MAX (microseconds) from holds.py.
 */

/* The time us microseconds since the epoch, as the double returned, and
 * in text (32 bytes) the shortest decimal that reads back as that double,
 * which is what Python's repr writes; "" outside [GATE_STAMP_MIN,
 * GATE_STAMP_MAX), where that rule does not hold.
 */
double gate_stamp_us (long long us, char *text)
{
    char digits[24];
    long long n = us;
    int len = 0;
    int i = 0;
    int last = 0;
    int k;

    text[0] = '\0';
    if (us < GATE_STAMP_MIN || us >= GATE_STAMP_MAX)
        return (double)us / 1e6;
    /* Written by hand: snprintf's reading of its format costs more than
     * the digits.  digits[] is least significant first, at least seven:
     * digits[0..5] are the fraction, whose trailing zeros go (one stays).
     */
    do {
        digits[len++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0 || len < 7);
    while (len > 6)
        text[i++] = digits[--len];
    text[i++] = '.';
    while (last < 5 && digits[last] == '0')
        last++;
    for (k = 5; k >= last; k--)
        text[i++] = digits[k];
    text[i] = '\0';
    return (double)us / 1e6;
}

/* Now, rounded to the microsecond (see gate_stamp_us). */
double gate_stamp (char *text)
{
    struct timespec ts;

    if (clock_gettime (CLOCK_REALTIME, &ts) < 0) {
        text[0] = '\0';
        return 0.;
    }
    return gate_stamp_us ((long long)ts.tv_sec * 1000000
                          + (ts.tv_nsec + 500) / 1000,
                          text);
}

/* vi: ts=4 sw=4 expandtab
 */
