// The rule controls decide; these actions write the decision into metadata,
// where Lanes, Emit and Forward carry it out. One place, so every case of the
// rule spells its output the same way. They are called directly, never from a
// table, so each is @hidden: p4c lists every other action in the P4Info.
#ifndef INASCHED_OUTPUTS_P4
#define INASCHED_OUTPUTS_P4

// Nothing leaves: the contribution stays in the aggregator (or was a duplicate).
@hidden
action out_nothing(inout metadata_t meta, bit<8> outcome) {
    meta.outcome = outcome;
    meta.dest = DEST_NONE;
}

// The packet itself goes on to its job's PS.
@hidden
action out_bypass(inout metadata_t meta, bit<8> outcome, bit<16> flags) {
    meta.outcome = outcome;
    meta.dest = DEST_PS;
    meta.emit = EMIT_BYPASS;
    meta.emit_flags = flags;
}

// The aggregator's sum leaves, with the contributors and exponent given.
@hidden
action out_sum(inout metadata_t meta, bit<8> outcome, bit<8> dest, bit<8> kind,
               bit<16> flags, bit<32> bitmap, bit<8> exponent) {
    meta.outcome = outcome;
    meta.dest = dest;
    meta.emit = EMIT_SUM;
    meta.emit_kind = kind;
    meta.emit_flags = flags;
    meta.sum_bitmap = bitmap;
    meta.sum_exponent = exponent;
}

// The packet's (job, seq) takes the aggregator with its own contribution.
@hidden
action claim(inout metadata_t meta, bit<16> job, bit<32> seq, bit<32> bitmap,
             bit<8> exponent, bit<8> priority) {
    meta.next.job = job;
    meta.next.seq = seq;
    meta.next.state = STATE_PARTIAL;
    meta.next.bitmap = bitmap;
    meta.next.count = 1;
    meta.next.exponent = exponent;
    meta.next.priority = priority;
    meta.lane_op = LANE_OP_WRITE;
}

// Back to the pool; the lanes are overwritten by the next claim.
@hidden
action free_aggregator(inout metadata_t meta) {
    meta.next.state = STATE_FREE;
    meta.next.bitmap = 0;
    meta.next.count = 0;
}

#endif
