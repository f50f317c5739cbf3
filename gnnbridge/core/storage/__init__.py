"""Storage: datasets on disk, everything that reads or writes their files.

* :mod:`.formats`: which arrays make a graph (names, dtypes, dimensions), for an ``.npz`` file
  and a folder of ``.npy`` files alike, and the records they make;
* :mod:`.npy`: the one reader of ``.npy`` headers (a folder's files, an archive's members);
* :mod:`.prepare`: ``gnnbridge prepare``, a folder checked once and its derived files written
  (CSC topology, converted features, the manifest);
* :mod:`.folder`: a prepared folder opened, every array memory-mapped;
* :mod:`.linkcache`: a link task's topology built through the disk and mapped;
* :mod:`.partition` and :mod:`.parts`: ``gnnbridge partition`` writing one part per machine,
  and a machine opening its own; :mod:`.linkparts`: a link task's split and negatives cut into
  those parts, and a machine's share of it opened.

Why one room: these modules share the on-disk layout (the manifest, the derived files, the
``.partial`` names and locks of :mod:`gnnbridge.core.files`), the refusals of a changed,
read-only or full folder, and the rule that every array is mapped, never loaded whole. It sits
above the in-memory records (:mod:`gnnbridge.core.records`) and the tasks (a link cache holds
a task's split), below the plugin machinery that loads datasets through it; it runs no job and
imports no runtime (a command's stop handling is its caller's).

May import: ``errors``, ``compiled``, ``environ``, ``host``, ``files``, ``records``, ``config``,
``contracts``, ``tasks``.
"""
