"""Why a node runs on the host when ncnn's engine runs the rest: the keys the cut and the ncnn
lowering mark nodes with, and each reason as the plan records it and the lowering report shows it."""

HOST_REASON = "fxdeploy_host_reason"
"""The ``node.meta`` key under which the cut records why a node runs on the host."""
FORCED = "fxdeploy_host_forced"
"""The ``node.meta`` key that sends a node to the host whatever its op, with the reason: the ncnn
lowering sets it on the nodes behind a layer pnnx left unconverted (``partition.recut``)."""

# Why a node runs on the host, as the plan records it and the lowering report shows it.
NO_NMS_LAYER = "ncnn has no NMS layer"
NO_SELECTION_LAYER = "ncnn has no top-k, sort, nonzero, scatter or cumsum layer, and this one reads the inputs"
NO_GATHER_LAYER = "ncnn has no gather or index layer, and the index is computed at run time on the host"
AFTER_NMS = "reads the NMS's results"
NO_AXIS_LAYER = "ncnn has no layer for it (a comparison, a cast, an argmax over one axis), and only host ops read it"
BETWEEN_HOST_OPS = "only host ops read it, and it reads host values: in an engine it would pass values back and forth"
NO_ARGMAX_LAYER = "ncnn has no argmax or argmin over one axis (its ArgMax reduces the whole blob)"
INTEGER_ON_HOST = ("integer or bool values computed from host values: ncnn has no integers (its remainder rounds to "
                   "nearest)")
COPIED_IN = ("copied in by the cut: a size, or a value made without the inputs, which no stage hands over (or a "
             "squeeze of a value handed over with a leading 1)")
STEPPED_WRITE = "pnnx writes a stepped slice_scatter as ncnn's CopyTo, which ignores the step"
INFINITE_WINDOW = ("the graph can fill its windows with an infinity, and over a window of infinities only ncnn gives "
                   "a finite float, the lowest or the largest (eager: the infinity)")
MADE_FROM_SIZES = ("made from the image's run-time size: ncnn cannot make it, and pnnx folds it only at a fixed "
                   "size; the engine takes it as an input")
