"""What the benchmark scripts write beside their numbers: the run's device, date, commit
(FLASHJIT_COMMIT) and versions, and the JSON and Markdown files named on their command line."""
import datetime
import json
import os

import torch


def run_meta(lib, **extra):
    """The run's facts for the result files: device, date, commit, torch and flashjit, then `extra`."""
    return {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "commit": os.environ.get("FLASHJIT_COMMIT", "unknown"), "torch": torch.__version__,
            "flashjit": lib.flashjit_version().decode(), **extra}


def write_results(json_path, md_path, meta, res, write_md):
    """{"meta": meta, **res} as JSON to json_path, and write_md(md_path, meta, res); None skips either."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": meta, **res}, f, indent=1)
    if md_path:
        write_md(md_path, meta, res)
