"""Writes a psql script of N executions of the step statement, for one run row, 2 events a
step. Usage: step-sql-cpu.py full|var N FIRST_SEQ STEPS_RS, where STEPS_RS is 0216cbb's
shared/store/src/steps.rs (`git show 0216cbb:shared/store/src/steps.rs`), whose STEP_SQL is the
`full` statement; `var` is the update-and-events shape fb624d8 sends for such a batch."""
import re,sys
sql=open(sys.argv[4]).read()
m=re.search(r'pub const STEP_SQL: &str = "(.*?)";',sql,re.S); full=m.group(1)
types=["uuid[]","bigint[]","smallint[]","int[]","jsonb[]","text[]","text[]","jsonb[]","jsonb[]","uuid[]","bigint[]","text[]","jsonb[]","uuid[]","text[]","text[]","jsonb[]","bool[]","uuid[]","text[]","text[]","jsonb[]","text[]","bool[]","bigint[]","bigint[]","bigint[]"]
# variant: turn update + events only
variant = """WITH req AS (
        SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::smallint[], $4::int[], $5::jsonb[],
                             $6::text[], $7::text[], $8::jsonb[], $9::jsonb[])
            AS r(id, epoch, mode, iterations, usage, status, stop_reason, error, interrupt)),
    updated AS (
        UPDATE runs SET iterations = req.iterations, usage = req.usage,
            status = COALESCE(req.status, runs.status),
            stop_reason = CASE WHEN req.mode = 3 THEN req.stop_reason ELSE runs.stop_reason END,
            error = CASE WHEN req.mode = 3 THEN req.error ELSE runs.error END,
            pending_interrupt = CASE req.mode WHEN 2 THEN req.interrupt WHEN 3 THEN NULL
                                ELSE runs.pending_interrupt END,
            lease_owner = CASE WHEN req.mode >= 2 THEN NULL ELSE runs.lease_owner END,
            lease_expires_at = CASE WHEN req.mode >= 2 THEN NULL ELSE runs.lease_expires_at END,
            finished_at = CASE WHEN req.mode = 3 THEN now() ELSE runs.finished_at END,
            lapses = 0, updated_at = now()
        FROM req WHERE runs.id = req.id AND runs.lease_epoch = req.epoch AND req.mode > 0
        RETURNING runs.id, runs.tenant_id, runs.lease_epoch),
    fence AS (SELECT * FROM updated),
    appended AS (
        INSERT INTO run_events (run_id, seq, tenant_id, kind, data, epoch)
        SELECT e.run_id, e.seq, f.tenant_id, e.kind, e.data, f.lease_epoch
        FROM UNNEST($10::uuid[], $25::bigint[], $11::bigint[], $12::text[], $13::jsonb[])
            AS e(run_id, epoch, seq, kind, data)
        JOIN fence f ON f.id = e.run_id AND f.lease_epoch = e.epoch)
    SELECT id, lease_epoch FROM fence"""
N=int(sys.argv[2]); which=sys.argv[1]
rid='11111111-1111-1111-1111-111111111111'
out=["SET enable_seqscan=off;", "SET plan_cache_mode=force_generic_plan;"]
if which=='full':
    out.append("PREPARE step(%s) AS %s;"%(", ".join(types),full))
else:
    vt=types[:9]+[types[9],types[24],types[10],types[11],types[12]]
    out.append("PREPARE step(%s) AS %s;"%(", ".join(vt),variant.replace("$25::","$11::").replace("$11::bigint[], $12::text[], $13::jsonb[]","$12::bigint[], $13::text[], $14::jsonb[]")))
base=int(sys.argv[3])
for i in range(N):
    s=base+i*2
    a=["'{%s}'"%rid,"'{1}'","'{1}'","'{%d}'"%i,"""'{"{\\"in\\":1}"}'""","'{NULL}'","'{NULL}'","'{NULL}'","'{NULL}'",
       "'{%s,%s}'"%(rid,rid),"'{%d,%d}'"%(s,s+1),"'{text_delta,message}'","""'{"{\\"t\\":\\"hello\\"}","{\\"t\\":\\"world\\"}"}'""",
       "'{}'","'{}'","'{}'","'{}'","'{}'","'{}'","'{}'","'{}'","'{}'","'{}'","'{}'","'{1,1}'","'{}'","'{}'"]
    if which!='full':
        a=a[:9]+[a[9],a[24],a[10],a[11],a[12]]
    out.append("EXECUTE step(%s);"%", ".join(a))
print("\n".join(out))
