"""`polymorph`: run the loop on one machine, query it, feed it traffic.

Commands import their heavy parts lazily so `polymorph sql` starts in well under a second.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from services.common.config import CommonSettings, Env
from services.common.log import configure_logging

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"


def _nats_url(args: argparse.Namespace, identity: str = "operator") -> str:
    from services.console.stack import resolve_nats_url

    return resolve_nats_url(args.nats or Env.current().optional("NATS_URL"), args.data_dir, identity)


def cmd_up(args: argparse.Namespace) -> int:
    from services.console.live import run_up

    return run_up(args.data_dir, args.port)


def cmd_demo(args: argparse.Namespace) -> int:
    from services.console.demo import DemoOptions, run_demo

    options = DemoOptions(
        data_dir=args.data_dir / "demo",
        trace=args.trace,
        speed=args.speed,
        stall_s=args.stall_timeout,
        summary_json=args.summary_json,
    )
    return asyncio.run(run_demo(options))


def cmd_sql(args: argparse.Namespace) -> int:
    from services.console import client, tables
    from services.console.term import make_console

    reply = asyncio.run(client.sql(_nats_url(args), args.query, max_rows=args.max_rows,
                                   json_values=args.format == "json"))
    if reply.error:
        print(f"error: {reply.error}", file=sys.stderr)
        return 1
    if args.format == "csv":
        sys.stdout.write(tables.sql_csv(reply))
        if reply.truncated:  # stdout stays plain CSV
            print(tables.truncation_notice(reply), file=sys.stderr)
    elif args.format == "json":  # says "truncated" itself
        print(tables.sql_json(reply))
    else:
        make_console().print(tables.sql_table(reply))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from services.console import client

    reply = asyncio.run(client.export(_nats_url(args), args.dir))
    if reply.error:
        print(f"error: {reply.error}", file=sys.stderr)
        return 1
    for path in reply.files:
        print(path)
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from proto.gen.polymorph.v1 import events_pb2 as ev
    from services.console import client

    request = ev.StartCampaignRequest(model=args.model, slots=args.slots, budget=args.budget)
    campaign = asyncio.run(client.start_campaign(_nats_url(args), request))
    if not campaign.campaign_id:  # refused: the reason travels as stop_reason
        print(f"error: campaign not started: {campaign.stop_reason or 'the agent pool failed (see its log)'}",
              file=sys.stderr)
        return 1
    print(f"campaign {campaign.campaign_id} started: model={campaign.model} slots={','.join(campaign.slots)} "
          f"budget={campaign.budget}; follow it with `polymorph status --watch`")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from services.console.live import run_status

    return asyncio.run(run_status(_nats_url(args), watch=args.watch))


def _column_mapping(args: argparse.Namespace):
    from services.traffic_profiler.readers import ColumnMapping

    return ColumnMapping.parse(args.columns) if args.columns else None


def cmd_replay(args: argparse.Namespace) -> int:
    from services.console import client
    from services.traffic_profiler.replay import replay_trace

    if not Path(args.trace).is_file():
        print(f"error: no trace file at {args.trace}", file=sys.stderr)
        return 2
    url = _nats_url(args, "traffic")  # a replay publishes traffic and nothing else

    async def replay():  # checked first: the replay's own connection retries forever, as services do
        await client.ensure_reachable(url)
        return await replay_trace(url, args.trace, args.speed, limit=args.limit, progress=True,
                                  mapping=_column_mapping(args))

    print(asyncio.run(replay()).summary())
    return 0


def cmd_credentials(args: argparse.Namespace) -> int:
    from services.console import credentials

    files = credentials.write(args.out, nats_host=args.nats_host)
    print(f"wrote {len(files)} files to {args.out} (NATS users and permissions, one env file per identity, "
          "the registry's signing key); keep them out of version control")
    print(f"next: POLYMORPH_SECRETS_DIR={args.out} docker compose up --build -d")
    return 0


PROFILE_FLAGS = {"window_s": "--window", "reference_s": "--reference", "cache_blocks": "--cache-blocks",
                 "reorder_s": "--reorder"}  # DetectorConfig field -> flag (the rest: POLYMORPH_TRAFFIC_PROFILER_*)


def cmd_profile(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from services.traffic_profiler.config import DetectorConfig
    from services.traffic_profiler.report import profile_command

    try:  # the documented variables, as the live profiler reads them; flags win
        config = DetectorConfig.from_env(Env.current())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    flags = {name: getattr(args, name) for name in PROFILE_FLAGS if getattr(args, name) is not None}
    return profile_command(args.trace, json_out=args.json, plot=args.plot, mapping=_column_mapping(args),
                           config=replace(config, **flags))


def build_parser() -> argparse.ArgumentParser:
    common = CommonSettings.from_env()
    parser = argparse.ArgumentParser(prog="polymorph", description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=common.data_dir,
                        help="state of the embedded stack (POLYMORPH_DATA_DIR, default .polymorph)")
    parser.add_argument("--nats", help="NATS URL (POLYMORPH_NATS_URL; default: the running `polymorph up`)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start nats-server and the five services here, with live logs; restart "
                                   "whatever dies")
    up.add_argument("--port", type=int, default=0,
                    help="NATS port (POLYMORPH_NATS_PORT; default 4222 when free, else any free port)")
    up.set_defaults(func=cmd_up)

    demo = sub.add_parser("demo", help="replay a real trace with a drift and run the whole loop on llama-tiny")
    demo.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    demo.add_argument("--speed", type=float, default=200.0, help="replay speed (x real time)")
    demo.add_argument("--stall-timeout", type=float, default=300.0,
                      help="give up after this many seconds without any progress (no fixed overall limit)")
    demo.add_argument("--summary-json", type=Path, help="write the summary as JSON here")
    demo.set_defaults(func=cmd_demo)

    sql = sub.add_parser("sql", help="read-only SQL on the registry")
    sql.add_argument("query")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.add_argument("--max-rows", type=int, default=0,
                     help="rows to return (0: the registry's default, 1000 unless configured); every "
                          "format says when rows were left out")
    sql.set_defaults(func=cmd_sql)

    export = sub.add_parser("export", help="write every registry table as Parquet into DIR under the "
                                           "registry's export root (<data dir>/exports on its host)")
    export.add_argument("dir", help="a relative directory name such as snapshots/monday")
    export.set_defaults(func=cmd_export)

    optimize = sub.add_parser("optimize", help="start a campaign now, without waiting for drift")
    optimize.add_argument("--model", default=common.model)
    optimize.add_argument("--slots", type=lambda s: [x for x in s.split(",") if x], default=[],
                          help="comma-separated slots (default: all the library knows)")
    optimize.add_argument("--budget", type=int, default=0, help="max candidates (0: the agent pool's default)")
    optimize.set_defaults(func=cmd_optimize)

    status = sub.add_parser("status", help="campaign progress per slot")
    status.add_argument("--watch", action="store_true", help="refresh live until Ctrl-C")
    status.set_defaults(func=cmd_status)

    replay = sub.add_parser("replay", help="publish a trace file to traffic.requests")
    replay.add_argument("trace", type=Path)
    replay.add_argument("--speed", type=float, default=1.0, help="x real time; 0 = as fast as possible")
    replay.add_argument("--limit", type=int, default=None)
    replay.add_argument("--columns", help="generic CSV/JSONL mapping, e.g. arrival=ts:ms,prompt=in,output=out")
    replay.set_defaults(func=cmd_replay)

    creds = sub.add_parser("credentials", help="write the NATS config, per-identity env files and the registry's "
                                              "signing key that compose.yaml runs with")
    creds.add_argument("--out", type=Path, default=Path("secrets"), help="folder (default ./secrets)")
    creds.add_argument("--nats-host", default="nats", help="the NATS host in each URL (compose: its service)")
    creds.set_defaults(func=cmd_credentials)

    profile = sub.add_parser("profile", help="windows and detected changes of a trace file")
    profile.add_argument("trace", type=Path)
    profile.add_argument("--json", action="store_true", help="print one JSON object")
    profile.add_argument("--plot", type=Path, default=None, help="PNG of the windowed statistics")
    profile.add_argument("--columns", help="generic CSV/JSONL mapping, e.g. arrival=ts:ms,prompt=in,output=out")
    profile.add_argument(PROFILE_FLAGS["window_s"], dest="window_s", type=float,
                         help="current window in seconds (POLYMORPH_TRAFFIC_PROFILER_WINDOW_S, default 60)")
    profile.add_argument(PROFILE_FLAGS["reference_s"], dest="reference_s", type=float,
                         help="reference span in seconds (POLYMORPH_TRAFFIC_PROFILER_REFERENCE_S, default 900)")
    profile.add_argument(PROFILE_FLAGS["cache_blocks"], dest="cache_blocks", type=int,
                         help="simulated prefix-cache capacity in blocks, 0 unbounded "
                              "(POLYMORPH_TRAFFIC_PROFILER_CACHE_BLOCKS, default 1000000)")
    profile.add_argument(PROFILE_FLAGS["reorder_s"], dest="reorder_s", type=float,
                         help="reordering window in seconds (POLYMORPH_TRAFFIC_PROFILER_REORDER_S, default 60)")
    profile.set_defaults(func=cmd_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging("console", "warning")
    from services.console.client import StackUnavailable

    try:
        return args.func(args)
    except StackUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
