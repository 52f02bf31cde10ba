"""Static scan for state keyed by the identity of objects that can die.

CPython's ``id()`` is an address, and a freed object's address goes to the next object of
its size. A registry keyed by ``id(obj)`` that outlives ``obj`` therefore answers for an
unrelated new object later: this is how FP8 weights tracked by ``id(weight._data)`` in
process-global maps fired scale updates at unplanned moments. The scan reads Python source
with :mod:`ast` (nothing scanned is imported or run) and reports every place such a key is
made, stored, looked up or kept.

Usage: ``python -m harness scan [PATH...]`` or ``python -m harness.scan`` (no path: the
current directory). Options: ``--format text|json|sarif``, ``--all`` (also the hazards of low
confidence and the safe findings), ``--hazards-only`` (with ``--all``: no safe findings),
``--exclude GLOB``, ``--baseline FILE`` / ``--write-baseline FILE``, ``--sentinel-registries``.

Output: one finding per registry -- the dict, set or saved id that state is keyed by --
with all its uses. The header line is ``file:line:col: CODE title: REGISTRY (N stores, M
reads) (hazard, high confidence)`` at the first use, 1-based line and column; indented below
it, for a hazard, ``why:`` (how long the registry lives, what it is keyed by, and the use
that goes wrong), ``confidence:`` (how sure the scan is, and why) and ``fix:``; for a safe
finding ``safe:`` with the reason; then one line per use (``store``, ``read``, ``saved``,
``cached``) with the whole expression. ``--sentinel-registries`` prints, instead, one
``--sentinel-registry=MODULE:ATTR`` per reported hazardous registry a module can reach, for
``pytest -p harness.sentinel``.

What is reported, and the exit status
-------------------------------------
By default: the hazards of **high** confidence and the files that could not be checked
(IDK010, IDK011). ``--all`` adds the hazards of **low** confidence and the safe findings;
``--all --hazards-only`` shows every hazard and no safe finding (``--hazards-only`` alone
changes nothing: the default shows no safe findings). ``confidence = "low"`` in the settings
reports every hazard, as ``--all --hazards-only`` does. Exit status: **0** when nothing is
reported at the reported confidence (safe findings do not count), **1** when a hazard or a
file that could not be checked is reported, **2** on bad input (an empty path, a path that
does not exist, a directory with no Python file, a bad setting or baseline), with one line on
stderr. ``--sentinel-registries`` and ``--write-baseline`` exit 0 (2 on bad input), so
``$(...)`` works under ``set -e``. A file that cannot be parsed is one IDK010 finding; every
other file is still scanned and reported.

Confidence (:mod:`harness.scan.confidence`)
-------------------------------------------
A hazard is real when the keyed object can die while its entry lives and a later lookup can
match a new object. **High**: both halves are seen -- a process-wide container (module
global, class attribute, a container returned by a ``functools.cache`` function) keyed by
objects callers pass in; an id of the owner's own attributes saved on the owner; ids of the
code's own object (``self``, what it holds) kept in a container of an object a getter hands
out (``lm = current_mode(); lm.cache[id(self)]``); or a container in thread-local storage (an
attribute made with ``threading.local()``) of an object the callers pass, one registry in
every function that reaches it by that path; and, whatever the owner, ids of exceptions an
``except ... as`` caught (they die when the handler ends) and entries that keep their object
only through a ``weakref.ref`` no hit calls; and a memoising wrapper's store, however its
container is reached (a captured variable, an attribute of the captured ``self`` filled
through the cache's own ``get``/``set``): a nested function that calls the function its maker
was given with its own arguments and keys the result by them, directly or through a key made
from them (``hash(args)``, the hash of a tuple or local grown over them, a helper or key
factory in any scanned file given them, a digest fed the arguments' hashes, a nested
``make_key(*args)``), also when the wrapper is made by a method of a module-level instance or
handed back inside a call (``return property(wrapper)``), when its store is fetched on each
call or was given to its maker, and when the inner decorator sets the wrapped function
through ``nonlocal``; a memo service, a function that calls a function it is given with the
rest of its arguments and keys the result by them (``use_cache(key, f, *args)``); a
descriptor's ``__get__`` keyed by the id of the instance it is read on, in the descriptor's
own store, unless the entry is made from that instance; and a kept closure that stands in
for a function its maker was given (it calls that function with its own arguments); a
metaclass's ``__call__`` keeping the instance it makes from its arguments under their key in
an attribute of the class; and stores found however the key travels: a helper of the module
storing into the container it is given (``_cache_put(_CACHE, key, value)``), a key made by a
method of an object built with an id-derived argument (``KeyBuilder(prefix=f"m_{id(self)}")``).
**Low**, with the reason: only lookups are in the scanned files; nothing reads the registry
at all where every read would be in view (a local, a closure's, a private attribute or module
global no other scanned file names); a closure's keys are objects of the call that made it,
not its arguments, or the closure is only handed to a method of an object
(``model.register_forward_hook(hook)``); the container is the caller's (a parameter) or comes
from code whose lifetime cannot be seen; it is an attribute of an object keyed by objects
passed to it (a pickler, a builder, one compile: the owner may live for one phase); the keyed
objects are the functions a decorator registers and returns, members of a module or class
namespace, or what every call passes as a module-level function; another module-level
container holds the object (``handlers[fn] = h`` beside ``ids.add(id(fn))``); a process-wide
entry keyed through the same key factory holds it (a pin); the code checks the entry against
the object with ``is``; a closure is kept (returned, installed) but neither memoises nor
wraps a function its maker was given; the container belongs to a module-level instance (a
manager whose users decide how long the keyed objects live); the keys are ids of the code's
own object (``self``, what it holds) kept in a container of another object the code's object
was given or built (``self._program.opts[id(self)]``); the call that stores each entry
removes it again outside a ``finally`` (left only when the work between raises); the
container is a ``WeakValueDictionary``, or each entry is a ``weakref.ref`` to its own keyed
object that some read calls; a callback the code hands on (an undo closure appended for
teardown, a lambda given to ``add_done_callback``) removes the entries; every use is in a test module (``test_*.py``,
``*_test.py``, ``conftest.py``); the container is an attribute emptied in a ``finally`` (the
ids of one ``repr`` or walk); or a stale entry changes nothing a user sees: source in
``linecache.cache`` (also under an imported alias), stores made only under ``if flag:`` of a
parameter defaulting to ``False`` that no scanned call passes, a set that only keeps a
warning from being repeated (reported by the function itself, not by a handler it installs,
or in an ``if k not in seen:`` block holding nothing but the add and the report),
an entry made from objects the lookup checks with ``is not`` and made anew when they differ;
every key also holds a clock reading or a random token; a saved id read back only into text;
every entry is one value that never dies (``d[id(engine)] = orm.Session``), read by key or
filled when missing; ``sys.modules`` written under an id-made name and never looked up by it;
a closure factory, public or private, whose every scanned call keeps the closure for one call;
the object is handed to a function of the module that appends it to a module-level list.
Ids of classes named in a literal (``frozenset(map(id, (int, str)))``), a wrapper that reads
or wraps the function keyed, and a memo kept on the object itself (``getattr(self, name)``)
are safe; so are an entry that is, or is made with, a closure reading the keyed object
(``Thread(target=run)``, ``_make_stop(container)`` of a module factory returning one), a
value given the object on an attribute in the statements right after the store
(``d[id(model)] = self; self._model = model``), an instance of a class looked up at run time
made with the object (``optimizer_class(config)``), and an entry each object writes under
``id(self)`` alone in its ``__init__``'s own body into a module registry only ever looked up
by key (an object born on a dead one's address overwrites the stale entry).

Forms for CI
------------
``--format sarif``: SARIF 2.1.0 (:mod:`harness.scan.sarif`), one result per registry, rules
by code, ``uri`` relative to the current directory with ``uriBaseId`` ``SRCROOT``,
``partialFingerprints`` from the code, file, registry and first-use text (not the line
number, so an edit above keeps a finding's identity). ``--baseline FILE`` leaves out what
``--write-baseline FILE`` recorded. Settings: ``[tool.fp8-harness.scan]`` in the nearest
``pyproject.toml`` above the scanned paths, ``exclude = ["glob", ...]`` (relative to that
file) and ``confidence = "high" | "low"`` (:mod:`harness.scan.settings`). The pre-commit hook
(``.pre-commit-hooks.yaml``, ``scripts/id-hazard-scan``) runs from a clone without installing
anything and scans the whole repository whatever files are staged.

Codes
-----
======  ======================================================================================
IDK001  dict keyed by ``id(x)``: ``d[id(x)] = v``, ``d[id(x)]``, ``d.get(id(x))``,
        ``d.setdefault(id(x), v)``, ``{id(x): v ...}`` and ``dict(zip(map(id, xs), vs))``
IDK002  set or list of ids: ``s.add(id(x))``, ``{id(w) for w in ws}``, ``set(map(id, ws))``,
        ``{pid}``, ``ids.append(id(x))`` (a list built in place, ``[id(x) for x in xs]``, is
        reported only once it leaves the function)
IDK003  membership test: ``id(x) in registry``, ``pid not in registry``
IDK004  key built from ids: tuples, f-strings, ``str()``/``hex()``/``format()`` and sums
        containing an id, used as a key, set element or membership operand or stored in a
        container; hand-written memo dicts keyed by them; an ``functools.lru_cache``/``cache``
        function of the same file called with an id argument; results of key factories
IDK005  ``hash(obj)`` used as a key where ``obj`` hashes by identity (heuristic below)
IDK006  an id (or key built from ids) saved on an attribute or a global and compared later
IDK010  a file that Python could not parse (syntax error, null bytes, bad encoding,
        nesting deeper than its parser takes); the message names the Python that parsed it
        (a file written for a newer Python fails with an older one); the scan goes on with
        the other files. Every file Python parses is analysed to its end
IDK011  a ``# id-hazard:`` comment without a reason; it suppresses nothing
======  ======================================================================================

Removing entries (``del d[id(x)]``, ``d.pop(id(x))``, ``s.discard(id(x))``) is pruning, the
cure, and is not reported. Ids used for printing, logging, ``__repr__``, sorting and ``==``
comparisons of live objects are not keys and are not reported either.

Severity
--------
Each IDK001-IDK006 finding is **safe** or a **hazard**; the message says which and why.
It is safe when:

* the same entry holds the object (``d[id(x)] = x``, ``d[id(x)] = (x, meta)``, a name bound
  to such a tuple, ``d.setdefault(id(x), []).append(x)``, ``{id(p): p for p in ps}``), is
  the object handed back by a function of the module that returns its argument, is a list
  bound to a local (``active = d.setdefault(id(x), [])``) that the block then gives a record
  made with the object, is made by
  a class chosen for the object and called with it (``get_cls(x)(x)``), is given the object
  on an attribute before the store (``prog.owner = x``), or holds the sequence a keyed item
  (``xs[0]``) comes from;
* the container (or attribute) belongs to the object itself (``self.tag = f"t{id(self)}"``);
* a ``weakref.finalize(x, ...)`` (or ``weakref.ref(x, callback)``) in the same function,
  or in a function of the module the store hands ``x`` to, prunes that container, directly or
  through a function of the same file, or a nested function, naming it;
* a ``finally:`` of the same function removes the entry again (a recursion guard: the
  entry lives only while the call that holds the object runs);
* another store in the same function, into state with the same root (``self``, ``cls``, the
  same global, or another module global beside a saved id: ``_LAST = x`` with ``_LAST_ID =
  id(x)``) and in the same or an enclosing block, holds the object;
* the container is a local that never escapes (not returned, yielded, stored elsewhere or
  captured by a nested function), a temporary, a copy-protocol memo (a parameter named
  ``memo`` or any parameter of ``__deepcopy__``), or a parameter that every caller in the
  same file (calls of a class count as calls of its ``__init__``; at least one caller
  besides the function itself) fills with such a local or leaves at its default;
* the object never dies: a class (``type(x)``, ``x.__class__``, ``cls``), a module-level
  function, class or import, an attribute of an imported module, a builtin;
* the function checks the key is in another registry every store into which holds its
  object (``assert key in self.tensors``, then ``self.owners[key] = ...``);
* the object is an element of a tuple bound in the same function as the registry (both
  captured by one closure), or of a list, set or parameter of that function that nothing
  empties (looped over, or appended to beside the store) where every closure keeping the
  registry keeps it too; or a second holder is reached through a local alias
  (``ids = self.a if rs else self.b``);
* each entry is a value made without the object and never changed (``streams[key] =
  torch.cuda.Stream()``; filled after it is made with the function's own locals, as in
  ``entry.register(item)``, it is changed): a stale match hands out a value as good as a
  fresh one;
* the storing function makes the object (an allocator) and another function removes
  single entries of the registry (the free of an allocate/free pair), or the registry is
  emptied by the ``__exit__`` of its class or after the ``yield`` of a ``@contextmanager``;
* the container is returned to callers (in the scanned files) that each use it at once, is
  captured only by nested functions (or methods of a class defined in the function and
  handed out only for a ``with`` block) that are called (not kept) while it lives, or is a
  parameter that defaults to None, starts as a new container and is passed only down the
  recursion;
* it is a read (lookup or membership) of a container every store into which, in any scanned
  file, is safe by one of the rules above (matched by ``Class.attr``, by module global, or,
  for an attribute of an object the scan cannot name, by the attribute's name), or a read of
  a container passed in, with the id taken of a live object, when no store into it is seen.

A ``reset()`` that some other code must remember to call does not bound a registry: that is
how the FP8 weight maps of TE 1.12 lived on between models.

Everything else is a hazard, notably module globals, class attributes, ``self.``
attributes, closure variables, containers passed in by unknown callers and anything
returned; each hazard then gets its confidence (above).

Data flow
---------
``reg[id(x)].append(v)`` (any mutating method on the looked-up entry) is a store into
``reg``, not a lookup; so is ``cache.set(key, value)``, a Redis client's ``setex(key, ttl,
value)`` and any method named by a setter's verb (``put``, ``store``, ``save``, ``add_entry``,
``set_one``, ...) given the key first and something more, also in a function the key is
handed to (a nested function beside the caller is followed as a module's function is). A container returned by a ``@functools.cache``/``lru_cache`` function
is one process-wide registry (the cache hands the same one to every caller), not a new
container per call. A local bound to a call of a function annotated to return a class of the
same file (``-> Mode | None``) is named as that class's attribute (``Mode.cache``).
Within a function, in source order: ``key = id(x)`` (also through ``if``-expressions and
``:=``), ``key = (id(a), n)``, loops over id collections (``for wid in ids``, ``for wid, v in
by_id.items()``), locals that alias long-lived containers (``reg = Manager.registry``) and
attributes set from ids in any method of the class (``self._key = id(x)``). Across
functions and files: *key factories*, functions or methods whose return value is id-derived
(``return f"group={id(group)}"``), are found first and their calls treated as keys, with
the arguments mapped to the objects (so a store holding that argument is safe); stores and
reads of the same class attribute are matched across files by ``Class.attr``.

The ``hash()`` heuristic
------------------------
``hash(obj)`` is an id in disguise when ``obj``'s class keeps ``object.__hash__``. The scan
flags it only when it can tell: ``hash(self)`` in a class of the same file that defines
neither ``__eq__`` nor ``__hash__`` (or whose ``__hash__`` returns ``id(self)``), is not a
dataclass/attrs class, and whose bases are such classes or ``object``, ``nn.Module``,
``torch.Tensor``, ``Parameter``, ``ABC``; ``hash(x)`` for a parameter annotated ``Tensor``,
``Module``, ``Parameter`` or such a class; ``hash(x)`` for a local bound only to ``Cls()``
of such a class or to ``object()``. And ``hash()`` of what callers pass: ``*args`` (and
``**kwargs`` handed on), a tuple, a local grown over them or what a helper makes of them
(:mod:`harness.scan.derived`), each of them in a comprehension over them (``hash(a) for a
in args``), and, in a key factory, a parameter left unannotated or annotated as any object
or a plain container, also hashed into a list it returns as a tuple or into a key grown by
``+=``; text made of them (``str``, ``repr``, a
``join``, an f-string, ``json.dumps``) ends that chain. Anything else of unknown type is not
flagged. ``hash()`` of a key made of ids is that key. A key that is ``hash()`` of what callers
pass is high only in a memoising wrapper; elsewhere it is low (the callers may pass strings).

Suppressions
------------
``# id-hazard: ok(<reason>)`` on the flagged line silences every finding of that line. The
reason is mandatory: a suppression claims the object outlives the entry, and a reviewer
must be able to check the claim.

Limits
------
Flow is followed in source order without branch sensitivity (except for the sibling and
finalizer rules); ``id`` renamed (``_id = id``) is not followed; a container passed to an
unknown function is assumed to be used only during the call; caches keyed by
``tensor.data_ptr()`` (address reuse of storage rather than of Python objects) are not in
scope; a file that never spells ``id`` or ``hash`` is only parsed, and analyzed only if it
calls a key factory.
"""

from harness.scan.codes import Code
from harness.scan.finding import Confidence
from harness.scan.finding import Finding, RegistryFinding, Severity
from harness.scan.scanner import ScanResult, scan_paths

__all__ = ["Code", "Confidence", "Finding", "RegistryFinding", "ScanResult", "Severity", "scan_paths"]
