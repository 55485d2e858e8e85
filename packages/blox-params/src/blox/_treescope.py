"""The treescope handlers of ``Params`` and ``Param`` (their ``__treescope_repr__`` calls these).

So ``treescope.show(params)`` and treescope's automatic notebook rendering show the paths,
values and flags without a registration step. ``treescope`` is an optional extra, imported only
when it renders. This module sits below ``_params`` and never imports it.
"""

from __future__ import annotations

from typing import Any


def params_treescope(params: Any, path: str | None, subtree_renderer: Any) -> Any:
    """The treescope rendering of ``params``: ``Params({path: Param(...), ...})``.

    Keys are the tuple paths, so treescope's copy-path feature gives ``params[('net', ...)]``,
    which indexes a ``Params`` as it should.
    """
    from treescope import repr_lib

    return repr_lib.render_dictionary_wrapper(
        object_type=type(params),
        wrapped_dict=dict(params.items()),
        path=path,
        subtree_renderer=subtree_renderer,
    )


def param_treescope(param: Any, path: str | None, subtree_renderer: Any) -> Any:
    """The treescope rendering of one ``Param``: its value (an array view), flag, metadata."""
    from treescope import repr_lib

    fields: dict[str, Any] = {"value": param.value, "trainable": param.trainable}
    if param.metadata:
        fields["metadata"] = dict(param.metadata)
    return repr_lib.render_object_constructor(
        object_type=type(param),
        attributes=fields,
        path=path,
        subtree_renderer=subtree_renderer,
    )
