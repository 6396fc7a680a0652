from typing import ClassVar, Self, TypeVar

from django.db import models
from treebeard.models import Node, NodeManager

_N = TypeVar("_N", bound=MP_Node)

class MP_NodeQuerySet(models.QuerySet[_N]): ...
class MP_NodeManager(NodeManager[_N]): ...

class MP_Node(Node):
    steplen: ClassVar[int]
    alphabet: ClassVar[str]
    node_order_by: ClassVar[list[str]]
    path: models.CharField[str, str]
    depth: models.PositiveIntegerField[int, int]
    numchild: models.PositiveIntegerField[int, int]
    objects: ClassVar[MP_NodeManager[Self]]

    class Meta:
        abstract = True
