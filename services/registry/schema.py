"""The registry's tables (migration 1). Primary keys are what make every insert idempotent.

Conventions: enum values are stored as short lower-case labels ('ok', 'passed', 'torch', ...);
nested or free-form fields are JSON text; `*_unix` columns are the publisher's clock (seconds);
`*_at` columns are TIMESTAMPs in UTC taken by the registry when it stored the row.
"""

from __future__ import annotations

TABLES: dict[str, str] = {
    # Every message the registry consumed, verbatim (protobuf → JSON). One row per (subject, key):
    # key is the message's natural id, so duplicated publishes and redeliveries collapse.
    "events": """
        CREATE TABLE IF NOT EXISTS events (
            subject VARCHAR NOT NULL,
            key VARCHAR NOT NULL,
            stream VARCHAR,
            stream_seq BIGINT,
            received_at TIMESTAMP NOT NULL,
            payload JSON,
            PRIMARY KEY (subject, key)
        )""",
    "hardware": """
        CREATE TABLE IF NOT EXISTS hardware (
            name VARCHAR PRIMARY KEY,
            first_engine_id VARCHAR,
            first_seen_at TIMESTAMP NOT NULL
        )""",
    "models": """
        CREATE TABLE IF NOT EXISTS models (
            name VARCHAR PRIMARY KEY,
            first_seen_at TIMESTAMP NOT NULL
        )""",
    "traffic_profiles": """
        CREATE TABLE IF NOT EXISTS traffic_profiles (
            profile_id VARCHAR PRIMARY KEY,
            source VARCHAR,               -- 'drift:<id>:reference', 'drift:<id>:current', 'campaign:<id>'
            model VARCHAR,
            window_start_s DOUBLE,
            window_end_s DOUBLE,
            requests BIGINT,
            prompt_p10 DOUBLE, prompt_p50 DOUBLE, prompt_p90 DOUBLE, prompt_p99 DOUBLE, prompt_mean DOUBLE,
            output_p10 DOUBLE, output_p50 DOUBLE, output_p90 DOUBLE, output_p99 DOUBLE, output_mean DOUBLE,
            arrival_rate DOUBLE,
            burstiness DOUBLE,
            prefix_hit_rate DOUBLE,
            concurrency DOUBLE,
            expert_load DOUBLE[],
            buckets JSON,                 -- [{phase, batch_size, context_len, weight}, ...]
            received_at TIMESTAMP NOT NULL
        )""",
    "drift_events": """
        CREATE TABLE IF NOT EXISTS drift_events (
            drift_id VARCHAR PRIMARY KEY,
            t_s DOUBLE,
            metrics VARCHAR[],            -- names of the metrics that changed
            changes JSON,
            reference_profile_id VARCHAR,
            current_profile_id VARCHAR,
            received_at TIMESTAMP NOT NULL
        )""",
    "campaigns": """
        CREATE TABLE IF NOT EXISTS campaigns (
            campaign_id VARCHAR PRIMARY KEY,
            model VARCHAR,
            slots VARCHAR[],
            trigger VARCHAR,
            budget INTEGER,
            state VARCHAR,                -- running → completed | failed (never backwards)
            profile_id VARCHAR,
            started_unix DOUBLE,
            finished_unix DOUBLE,
            proposed INTEGER,
            stop_reason VARCHAR,
            received_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        )""",
    "candidates": """
        CREATE TABLE IF NOT EXISTS candidates (
            candidate_id VARCHAR PRIMARY KEY,
            campaign_id VARCHAR,
            slot VARCHAR,
            backend VARCHAR,
            agent VARCHAR,
            params JSON,
            model VARCHAR,
            parent_id VARCHAR,
            created_unix DOUBLE,
            shapes JSON,
            source VARCHAR,
            received_at TIMESTAMP NOT NULL
        )""",
    "benchmarks": """
        CREATE TABLE IF NOT EXISTS benchmarks (
            candidate_id VARCHAR PRIMARY KEY,
            campaign_id VARCHAR,
            slot VARCHAR,
            status VARCHAR,               -- ok, load_error, raised, crashed, timeout, wrong_output
            reason VARCHAR,
            median_us DOUBLE, p10_us DOUBLE, p90_us DOUBLE, runs INTEGER,
            incumbent_median_us DOUBLE, incumbent_p10_us DOUBLE, incumbent_p90_us DOUBLE,
            incumbent_runs INTEGER,
            incumbent_id VARCHAR,
            aa_spread DOUBLE,
            speedup DOUBLE,
            speedup_lo DOUBLE,
            speedup_hi DOUBLE,
            speedup_vs_reference DOUBLE,
            engine_id VARCHAR,
            tier VARCHAR,
            hardware VARCHAR,
            model VARCHAR,
            bench_s DOUBLE,
            finished_unix DOUBLE,
            received_at TIMESTAMP NOT NULL
        )""",
    "verdicts": """
        CREATE TABLE IF NOT EXISTS verdicts (
            candidate_id VARCHAR PRIMARY KEY,
            campaign_id VARCHAR,
            slot VARCHAR,
            status VARCHAR,               -- passed | failed; a failure is final
            failed_stage VARCHAR,
            reason VARCHAR,
            checks JSON,
            speedup DOUBLE,
            speedup_lo DOUBLE,
            speedup_vs_reference DOUBLE,
            hardware VARCHAR,
            model VARCHAR,
            verify_s DOUBLE,
            finished_unix DOUBLE,
            decision VARCHAR,             -- NULL (waiting for its benchmark), promoted, rejected, demoted
            decision_reason VARCHAR,
            received_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        )""",
    "promotions": """
        CREATE TABLE IF NOT EXISTS promotions (
            candidate_id VARCHAR PRIMARY KEY,
            campaign_id VARCHAR,
            slot VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            hardware VARCHAR NOT NULL,
            backend VARCHAR,
            speedup DOUBLE,               -- over the incumbent it was measured against
            speedup_lo DOUBLE,
            speedup_vs_reference DOUBLE,
            incumbent_id VARCHAR,
            replaces_id VARCHAR,          -- the active promotion it replaced, '' when none
            active BOOLEAN NOT NULL,
            promoted_at TIMESTAMP NOT NULL,
            replaced_by VARCHAR,
            replaced_at TIMESTAMP,
            demoted_at TIMESTAMP,
            demote_reason VARCHAR
        )""",
    "board_notes": """
        CREATE TABLE IF NOT EXISTS board_notes (
            note_id VARCHAR PRIMARY KEY,
            campaign_id VARCHAR,
            agent VARCHAR,
            slot VARCHAR,
            text VARCHAR,
            params JSON,
            score DOUBLE,
            created_unix DOUBLE,
            received_at TIMESTAMP NOT NULL
        )""",
    # Messages the registry owes the bus (kernel.promoted / kernel.demoted). Written in the same
    # transaction as the decision, published afterwards: a crash in between re-publishes on start.
    "outbox": """
        CREATE TABLE IF NOT EXISTS outbox (
            subject VARCHAR NOT NULL,
            msg_id VARCHAR NOT NULL,
            message_type VARCHAR NOT NULL,
            payload BLOB NOT NULL,
            created_at TIMESTAMP NOT NULL,
            published_at TIMESTAMP,
            PRIMARY KEY (subject, msg_id)
        )""",
}

# Where the live step's time went when a campaign started (migration 3): one row per campaign slot.
STEP_PROFILES_DDL = """
    CREATE TABLE IF NOT EXISTS step_profiles (
        campaign_id VARCHAR NOT NULL,
        slot VARCHAR NOT NULL,
        share DOUBLE,                 -- of the step's time, weighted over the campaign's shapes
        us_per_step DOUBLE,
        step_us DOUBLE,
        received_at TIMESTAMP NOT NULL,
        PRIMARY KEY (campaign_id, slot)
    )"""

# migration 4: each slot's memory floor and its headroom above it (aim.py spends by headroom)
STEP_PROFILE_FLOORS = (
    "ALTER TABLE step_profiles ADD COLUMN IF NOT EXISTS floor_us DOUBLE",
    "ALTER TABLE step_profiles ADD COLUMN IF NOT EXISTS headroom DOUBLE",
)

# every table a current file holds: migration 1's and those added after it
ALL_TABLES: tuple[str, ...] = (*TABLES, "step_profiles")

SCHEMA_VERSION_DDL = """
    CREATE TABLE IF NOT EXISTS schema_version (
        version INTEGER PRIMARY KEY,
        name VARCHAR NOT NULL,
        applied_at TIMESTAMP NOT NULL
    )"""
