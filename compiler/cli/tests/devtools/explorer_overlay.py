"""Model Explorer's ExecuTorch extension over an ETRecord and an ETDump:
the graph its ETRecord adapter draws and the runtime overlay its ETDump
provider puts on it, as JSON for tests/devtools.rs.

    explorer_overlay.py MODEL.etrecord PROFILE.etdp

(Not named model_explorer.py: that is the package it imports.)
"""
import json
import sys
import warnings

warnings.filterwarnings("ignore")

from etdump_data_provider_model_explorer.provider import ETDumpProfilingOverlayProvider
from etrecord_adapter_model_explorer.main import ETRecordAdapter

etrecord, etdump = sys.argv[1:3]
graphs = []
for collection in ETRecordAdapter().convert(etrecord, {})["graphCollections"]:
    for graph in collection.graphs:
        nodes = {
            n.id: {
                "label": n.label,
                "debug_handle": next((str(a.value) for a in n.attrs if a.key == "debug_handle"), None),
            }
            for n in graph.nodes
        }
        result = ETDumpProfilingOverlayProvider().run(
            "etdump_data_provider", etrecord, graph.id, {"etdump_path": etdump}, graph
        )
        overlays = {
            d.name: {node: r.value for node, r in d.results.items()} for d in (result.result or [])
        }
        graphs.append({"id": graph.id, "nodes": nodes, "error": result.error, "overlays": overlays})
json.dump(graphs, sys.stdout)
