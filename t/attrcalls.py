"""The attributes a module's code takes of one collaborator, read from
its syntax tree: what the protocol checks of the gate's port and the dws
service compare with their Protocol."""

import ast


def attributes_taken(tree, name):
    """``(attribute, line)`` of every ``NAME.X`` in ``tree``, through any
    path that ends in ``NAME`` (``name.X``, ``self.name.X``,
    ``self.context.name.X``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if (isinstance(value, ast.Name) and value.id == name) or (
            isinstance(value, ast.Attribute) and value.attr == name
        ):
            yield node.attr, node.lineno
