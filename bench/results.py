"""What the benchmark scripts write beside their numbers: the run's device, date, commit
(FLASHJIT_COMMIT) and versions, and the JSON and Markdown files named on their command line; and
the parts of a run that --parts picks."""
import datetime
import json
import os

import torch


def run_meta(lib, **extra):
    """The run's facts for the result files: device, date, commit, torch and flashjit, then `extra`."""
    return {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "commit": os.environ.get("FLASHJIT_COMMIT", "unknown"), "torch": torch.__version__,
            "flashjit": lib.flashjit_version().decode(), **extra}


def add_file_arguments(parser):
    """--json and --md: the files write_results writes (either may be left out)."""
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--md", help="write the results here as Markdown")


def run_parts(chosen, parts):
    """{name: run()} for each (name, run) of `parts` whose name is in the comma-separated `chosen`,
    in the order of `parts`."""
    names = chosen.split(",")
    return {name: run() for name, run in parts.items() if name in names}


def write_results(json_path, md_path, meta, res, write_md):
    """{"meta": meta, **res} as JSON to json_path, and write_md(md_path, meta, res); None skips either."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": meta, **res}, f, indent=1)
    if md_path:
        write_md(md_path, meta, res)
