"""A PNG of live graph nodes and memory against iteration (needs the optional matplotlib)."""


def plot_history(records, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "MemoryMonitor.plot needs matplotlib: pip install 'needle-dl[plot]' (or pip install matplotlib); "
            "the records are also available as monitor.history, monitor.to_csv(path) and monitor.to_jsonl(path)"
        ) from error
    iterations = [r.iteration for r in records]
    figure, (nodes_axis, memory_axis) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    nodes_axis.plot(iterations, [r.live_nodes for r in records], label="live graph nodes")
    nodes_axis.plot(iterations, [r.live_spent_nodes for r in records], label="spent (after backward)")
    nodes_axis.set_ylabel("graph nodes")
    nodes_axis.legend()
    memory_axis.plot(iterations, [r.live_bytes / 1e6 for r in records], label="live arrays (MB)")
    memory_axis.plot(iterations, [r.host_rss / 1e6 for r in records], label="host RSS (MB)")
    if any(r.device_memory_in_use for r in records):
        memory_axis.plot(iterations, [r.device_memory_in_use / 1e6 for r in records], label="GPU pool (MB)")
    memory_axis.set_xlabel("iteration")
    memory_axis.set_ylabel("MB")
    memory_axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
