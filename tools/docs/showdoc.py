"""Reference entries as a library's docs show them, for the site's build (tools/docs/build.py).

nbdev's `show_doc` writes a signature as Python source in a code block, with each parameter's docment comment beside
it: markdown links in those comments show up raw, a parameter with no annotation is typed from its default
(`NoneType`), and a class with no `__init__` of its own is shown as `def X(*args, **kwargs)`. `DocRenderer` replaces
nbdev's renderer while the site is built (`use_in_nbdev()`); it writes

- a heading with the id nbdev's doc links point at (`loaderstats.since`), so every link to a symbol lands on it;
- the signature with the annotations and defaults **as written in the source** (`Optional[SummaryWriter | str]`,
  `IMAGENET_DEFAULT_MEAN`), never a type guessed from a default; a class as `class X(Base):` with its constructor's
  arguments (a NamedTuple as `class X(NamedTuple):` with its fields), an exception with its base;
- the object's own docstring (not one inherited from `typing.Protocol` or `object`), less an `Args:`/`Parameters`
  section that filled the table;
- the parameters as a table (name, type, default, the docment: a dataclass's or NamedTuple's from the comment after each
  field, a notebook's class too), where markdown renders as markdown.

Private names (`_x`, a module's `__getattr__`/`__dir__`) get no entry: the renderer returns nothing for them."""
from __future__ import annotations
import ast, dataclasses, enum, inspect, re, textwrap, typing

MAXLINE = 88  # a signature longer than this is written one parameter a line


def is_private(name: str) -> bool:
    "A name with a component `_x` (not a dunder), or a module's own `__getattr__`/`__dir__`."
    parts = name.split('.')
    if any(p.startswith('_') and not (p.startswith('__') and p.endswith('__')) for p in parts): return True
    return len(parts) == 1 and parts[0] in ('__getattr__', '__dir__')


def unwrap(obj):
    "The function or class behind decorators, properties and bound methods."
    if isinstance(obj, property): obj = obj.fget
    if isinstance(obj, (staticmethod, classmethod)): obj = obj.__func__
    obj = getattr(obj, '__func__', obj)
    try: return inspect.unwrap(obj)
    except ValueError: return obj


def _ast_def(fn):
    "The `def` node of `fn`'s own source (None where there is no source: builtins, generated functions)."
    try: src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError): return None, None
    try: tree = ast.parse(src)
    except SyntaxError: return None, None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__: return node, src
    return None, None


def _written(fn) -> dict:
    "Parameter name -> (annotation text, default text) as written in `fn`'s source; '->' for the return annotation."
    node, src = _ast_def(fn)
    if node is None: return {}
    def seg(n):  # as written, in one canonical spelling; a forward reference ('LoaderStats') without its quotes
        if n is None: return None
        return n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) and n in annos else ast.unparse(n)
    a = node.args
    annos = {x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None} | {node.returns}
    out = {}
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(pos, defaults): out[arg.arg] = (seg(arg.annotation), seg(d))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults): out[arg.arg] = (seg(arg.annotation), seg(d))
    if a.vararg: out[a.vararg.arg] = (seg(a.vararg.annotation), None)
    if a.kwarg: out[a.kwarg.arg] = (seg(a.kwarg.annotation), None)
    out['->'] = (seg(node.returns), None)
    return out


def _anno_text(anno) -> str | None:
    if anno is inspect.Parameter.empty: return None
    if isinstance(anno, typing.ForwardRef): anno = anno.__forward_arg__  # a NamedTuple's field under future annotations
    if isinstance(anno, str): return anno[1:-1] if len(anno) > 1 and anno[0] == anno[-1] and anno[0] in '\'"' else anno  # 'X' as X
    return inspect.formatannotation(anno).replace('typing.', '')


def _default_text(d) -> str | None:
    if d is inspect.Parameter.empty: return None
    if inspect.isfunction(d) or inspect.isclass(d): return d.__name__
    if isinstance(d, enum.Enum): return f'{type(d).__name__}.{d.name}'
    r = repr(d)
    return re.sub(r' at 0x[0-9a-f]+', '', r) if len(r) <= 60 else r[:57] + '...'


def _docments(obj, fn=None) -> dict:
    """Each parameter's docment (the comment after it), and 'return''s: fastcore's, and where it finds none (a parameter
    the formatter wrapped over several lines), the comments on the lines the parameter spans in `fn`'s source; for a
    NamedTuple or dataclass, the comment after each field in its class body (`_class_source`: one a notebook defines too)."""
    try:
        from fastcore.docments import docments
        out = {k: v for k, v in (docments(obj) or {}).items() if v}
    except Exception: out = {}
    for k, v in _span_comments(unwrap(fn or obj)).items(): out.setdefault(k, v)
    for o in _fielded(obj, fn):
        for k, (_, _, c) in _fields_written(o).items():
            if c: out.setdefault(k, c)
    for o in (fn, obj):  # a docstring's Parameters/Args section: the function's own, then (for a class) the class's
        for k, v in _section_docs(_own_doc(unwrap(o)) if o is not None else '').items():
            if not (k == 'return' and inspect.isclass(o)): out.setdefault(k, v)  # a class's Returns is not its __init__'s
    return out


_GOOGLE_HEAD = re.compile(r'^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|'
                          r'Returns|Return)\s*:\s*$')
_GOOGLE_ITEM = re.compile(r'^\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$')  # `name (type): what it is`, `*args: ...`


def _fielded(obj, fn=None) -> list:
    """The NamedTuples and dataclasses whose field comments are `obj`'s docments: `obj` itself, and those a function takes
    its parameters from (`fastcore.meta.delegates`' `__delwrap__`, as `create_loader` takes `LoaderOptions`')."""
    out, seen, o = [], set(), obj
    while o is not None and id(o) not in seen:
        seen.add(id(o))
        if _is_namedtuple(o) or (inspect.isclass(o) and dataclasses.is_dataclass(o)): out.append(o)
        o = getattr(unwrap(fn if o is obj and fn is not None else o), '__delwrap__', None)
    return out


def _is_namedtuple(obj) -> bool:
    "A class with `_fields`: a `typing.NamedTuple` or `collections.namedtuple` (its constructor has no source of its own)."
    return inspect.isclass(obj) and issubclass(obj, tuple) and isinstance(getattr(obj, '_fields', None), tuple)


def _class_source(cls) -> str | None:
    """A class's source: `inspect`'s, else (a class a notebook's cell defines, as the docs build runs it: its module is
    `__main__`, which has no file) the cell's, found through one of its methods' code, else the library module's class of
    that name (nbdev's index, `_modidx`) when it has the same fields; None where there is none."""
    try: return textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError): pass
    import linecache
    for v in cls.__dict__.values():
        f = unwrap(v)
        code = getattr(f, '__code__', None)
        if code is None or not getattr(f, '__qualname__', '').startswith(cls.__qualname__ + '.'): continue
        text = ''.join(linecache.getlines(code.co_filename))
        try: tree = ast.parse(text)
        except SyntaxError: continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__ and \
                    node.lineno <= code.co_firstlineno <= node.end_lineno:
                return textwrap.dedent('\n'.join(text.splitlines()[node.lineno - 1:node.end_lineno]))
    if cls.__module__ != '__main__': return None
    try:
        import importlib
        from nbdev.config import get_config
        lib = get_config().lib_name
        syms = importlib.import_module(f'{lib}._modidx').d['syms']
        homes = [m for m, d in syms.items() if f'{m}.{cls.__qualname__}' in d]
        if len(homes) != 1: return None
        twin = importlib.import_module(homes[0])
        for part in cls.__qualname__.split('.'): twin = getattr(twin, part)
        same = getattr(twin, '_fields', None) == getattr(cls, '_fields', None) and (
            [f.name for f in dataclasses.fields(twin)] == [f.name for f in dataclasses.fields(cls)]
            if dataclasses.is_dataclass(cls) and dataclasses.is_dataclass(twin) else True)
        return textwrap.dedent(inspect.getsource(twin)) if same and inspect.isclass(twin) else None
    except Exception: return None


def _fields_written(cls) -> dict:
    """Field -> (annotation text, default text, comment) of each `field: type = default  # comment` line of a class body,
    as written; the comment is the one on the field's lines, else the comment lines just above it."""
    import io, tokenize
    src = _class_source(cls)
    if src is None: return {}
    try: tree = ast.parse(src)
    except SyntaxError: return {}
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if node is None: return {}
    comments = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type == tokenize.COMMENT: comments[t.start[0]] = (t.start[1], t.string.lstrip('#').strip())
    except (tokenize.TokenError, IndentationError): return {}
    lines = src.splitlines()
    out, prev = {}, node.lineno
    for st in node.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            on = [comments[ln][1] for ln in range(st.lineno, st.end_lineno + 1) if ln in comments]
            above, ln = [], st.lineno - 1
            while ln > prev and ln in comments and not lines[ln - 1][:comments[ln][0]].strip():  # whole-line comments
                above.insert(0, comments[ln][1]); ln -= 1
            text = ' '.join(x for x in (on or above) if x)
            out[st.target.id] = (ast.unparse(st.annotation) if not (isinstance(st.annotation, ast.Constant) and
                                 isinstance(st.annotation.value, str)) else st.annotation.value,
                                 ast.unparse(st.value) if st.value is not None else None, text)
        prev = st.end_lineno
    return out


def without_filled_sections(doc: str, filled: set, returns: bool = False) -> str:
    """`doc` less each `Args:`/`Parameters` section (google- or numpy-style) whose every parameter is in `filled` (the
    parameters whose table row has Details), and its Returns section where `returns` (the table's Returns row has them):
    the table shows them already."""
    if not doc: return doc
    def filled_by(section: str) -> bool:
        got = _section_docs(section)
        return bool(got) and all((k == 'return' and returns) or (k != 'return' and k in filled) for k in got)
    lines, keep, i = doc.splitlines(), [], 0
    while i < len(lines):
        m = _GOOGLE_HEAD.match(lines[i])
        if m:
            base, j = len(m.group(1)), i + 1
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base): j += 1
            while j > i + 1 and not lines[j - 1].strip(): j -= 1  # the blank lines after it stay
            if filled_by('\n'.join(lines[i:j])):
                i = j
                continue
        elif i + 1 < len(lines) and re.fullmatch(r'\s*(Parameters|Other Parameters|Returns)\s*', lines[i]) \
                and re.fullmatch(r'\s*-{3,}\s*', lines[i + 1]):
            j = i + 2
            while j < len(lines) and not (j + 1 < len(lines) and lines[j].strip() and
                                          re.fullmatch(r'\s*-{3,}\s*', lines[j + 1])): j += 1
            while j > i + 2 and not lines[j - 1].strip(): j -= 1
            sec = '\n'.join(lines[i:j])
            if filled_by(sec if lines[i].strip() != 'Other Parameters' else sec.replace('Other Parameters', 'Parameters', 1)):
                i = j
                continue
        keep.append(lines[i])
        i += 1
    return re.sub(r'\n{3,}', '\n\n', '\n'.join(keep)).strip()


def _section_docs(doc: str) -> dict:
    """Parameter -> its description from a numpy-style (`Parameters` / `----------`, as fastcore reads it) or a
    google-style (`Args:`) section of a docstring; 'return' from its Returns section."""
    if not doc: return {}
    out = {}
    if re.search(r'^\s*(Parameters|Returns)\s*\n\s*-{3,}\s*$', doc, re.M):
        try:
            from fastcore.docments import parse_docstring
            nps = parse_docstring(doc)
            for k, prm in (nps.get('Parameters') or {}).items():
                if prm.desc: out[k.lstrip('*')] = ' '.join(' '.join(prm.desc).split())
            ret = nps.get('Returns') or []
            if ret and getattr(ret[0], 'desc', None): out['return'] = ' '.join(' '.join(ret[0].desc).split())
        except Exception: pass
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        m = _GOOGLE_HEAD.match(lines[i])
        i += 1
        if not m: continue
        base, is_ret, cur = len(m.group(1)), m.group(2).startswith('Return'), None
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base):
            line = lines[i].strip()
            ind = len(lines[i]) - len(lines[i].lstrip())
            i += 1
            if not line: continue
            if is_ret:
                out.setdefault('return', '')
                out['return'] = (out['return'] + ' ' + line).strip()
                continue
            item = _GOOGLE_ITEM.match(line)
            if item and (cur is None or ind <= cur[1]):
                cur = (item.group(1), ind)
                out[cur[0]] = item.group(2).strip()
            elif cur is not None: out[cur[0]] = (out[cur[0]] + ' ' + line).strip()
    return {k: v for k, v in out.items() if v}


def _span_comments(fn) -> dict:
    "Parameter -> the comments on the source lines from its name to its default (or annotation) and the comma after."
    import io, tokenize
    if inspect.isclass(fn): fn = _init_of(fn)
    if fn is None: return {}
    node, src = _ast_def(fn)
    if node is None: return {}
    comments = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type == tokenize.COMMENT: comments[t.start[0]] = t.string.lstrip('#').strip()
    except (tokenize.TokenError, IndentationError): return {}
    a = node.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    items = list(zip(pos, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
    items += [(x, None) for x in (a.vararg, a.kwarg) if x is not None]
    items.sort(key=lambda x: (x[0].lineno, x[0].col_offset))
    body = node.body[0].lineno if node.body else 10**9
    out = {}
    for i, (arg, d) in enumerate(items):
        end = max(n.end_lineno for n in (arg, arg.annotation, d) if n is not None)
        nxt = items[i + 1][0].lineno if i + 1 < len(items) else body
        last = end + 1 if nxt > end + 1 else end  # the line after the parameter too, when the next one starts later
        txt = ' '.join(comments[ln] for ln in range(arg.lineno, last + 1) if ln in comments and ln < nxt)
        if txt: out[arg.arg] = txt
    return out


def _own_doc(obj) -> str:
    "The object's own docstring: a class's from its own body, never one inherited from a base such as Protocol."
    if inspect.isclass(obj):
        d = obj.__dict__.get('__doc__')
        if isinstance(d, str) and re.fullmatch(rf'{re.escape(obj.__name__)}\(.*\)', d.strip(), re.S):
            return ''  # the signature a dataclass or NamedTuple writes as its docstring: the entry shows it already
    else: d = getattr(obj, '__doc__', None)
    return inspect.cleandoc(d) if isinstance(d, str) and d.strip() else ''


def _init_of(cls):
    "The constructor whose arguments a class takes: its own `__init__` (or a base's written in Python), else None."
    for k in cls.__mro__:
        if k is object or k.__module__ in ('builtins', 'typing', 'abc', 'typing_extensions'): continue
        for meth in ('__init__', '__new__'):
            f = k.__dict__.get(meth)
            if f is not None and inspect.isfunction(unwrap(f)) and unwrap(f).__module__ not in ('typing', 'typing_extensions'):
                return unwrap(f)
    return None


def params(fn, drop_self: bool = False, cls=None) -> list:
    """[(text, name, annotation, default, kind)] for `fn`'s signature, annotations and defaults as written (for the
    constructor of a NamedTuple `cls`, as its class body writes its fields)."""
    try: sig = inspect.signature(fn)
    except (TypeError, ValueError): return []
    wr = _written(unwrap(fn))
    if not wr and _is_namedtuple(cls): wr = {k: v[:2] for k, v in _fields_written(cls).items()}
    out, ps = [], list(sig.parameters.values())
    if drop_self and ps and ps[0].name in ('self', 'cls', '_cls'): ps = ps[1:]  # `_cls`: a NamedTuple's __new__
    seen_kwonly = False
    for i, p in enumerate(ps):
        anno, default = wr.get(p.name, (None, None))
        if anno is None: anno = _anno_text(p.annotation)
        if default is None: default = _default_text(p.default)
        if p.kind is p.KEYWORD_ONLY and not seen_kwonly and not any(q.kind is q.VAR_POSITIONAL for q in ps):
            out.append(('*', '*', None, None, 'marker'))
        seen_kwonly = seen_kwonly or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        star = '*' if p.kind is p.VAR_POSITIONAL else '**' if p.kind is p.VAR_KEYWORD else ''
        txt = star + p.name + (f': {anno}' if anno else '') + ((' = ' if anno else '=') + default if default else '')
        out.append((txt, star + p.name, anno, default, p.kind.name))
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(ps) or ps[i + 1].kind is not p.POSITIONAL_ONLY):
            out.append(('/', '/', None, None, 'marker'))
    ret = wr.get('->', (None, None))[0] or _anno_text(sig.return_annotation)
    return out, ret


def signature_text(prefix: str, name: str, fn, drop_self=False, suffix='') -> str:
    ps, ret = params(fn, drop_self) if fn is not None else ([], None)
    args = [p[0] for p in ps]
    tail = (f' -> {ret}' if ret else '') + suffix
    one = f'{prefix}{name}({", ".join(args)}){tail}'
    if len(one) <= MAXLINE or not args: return one
    ind = ' ' * 4
    return f'{prefix}{name}(\n' + ''.join(f'{ind}{a},\n' for a in args) + f'){tail}'


def _cell(s) -> str: return '' if s is None else str(s).replace('|', '\\|').replace('\n', ' ')


def filled(fn, drop_self=False, docs_of=None) -> tuple:
    "({parameters whose row in `fn`'s table has Details}, whether its Returns row has them): see `param_table`."
    if fn is None: return set(), False
    ps, _ = params(fn, drop_self, cls=docs_of)
    docs = _docments(docs_of or fn, fn)
    return {p[1].lstrip('*') for p in ps if p[4] != 'marker' and docs.get(p[1].lstrip('*'))}, bool(docs.get('return'))


def param_table(fn, drop_self=False, docs_of=None) -> str:
    "A markdown table of `fn`'s parameters: name, type and default as written, and the docment."
    if fn is None: return ''
    ps, ret = params(fn, drop_self, cls=docs_of)
    ps = [p for p in ps if p[4] != 'marker']
    docs = _docments(docs_of or fn, fn)
    if not ps and not (ret and docs.get('return')): return ''
    rows = ['| Parameter | Type | Default | Details |', '| --- | --- | --- | --- |']
    for txt, name, anno, default, kind in ps:
        d = docs.get(name.lstrip('*'), '')
        rows.append(f'| `{_cell(name)}` | {"`" + _cell(anno) + "`" if anno else ""} | '
                    f'{"`" + _cell(default) + "`" if default else ""} | {_cell(d)} |')
    if ret or docs.get('return'):
        rows.append(f'| **Returns** | {"`" + _cell(ret) + "`" if ret else ""} |  | {_cell(docs.get("return", ""))} |')
    return '\n'.join(rows)


def bases_text(cls) -> str:
    bs = [b for b in cls.__bases__ if b is not object]
    if _is_namedtuple(cls) and bs == [tuple]:  # `class X(NamedTuple)` as written, not the tuple it makes
        bs = [b for b in getattr(cls, '__orig_bases__', ()) if getattr(b, '__name__', None) == 'NamedTuple'] or bs
    def nm(b):
        q = b.__qualname__
        if b.__module__ in ('builtins',): return q
        if b.__module__ in ('typing', 'typing_extensions'): return q
        return q
    return f'({", ".join(nm(b) for b in bs)})' if bs else ''


def entry_markdown(obj, name: str, level: int = 3, anchor: str | None = None, source: str | None = None,
                   explained: str | None = None) -> str:
    """The markdown of one reference entry for `obj`, shown as `name`; '' for a private name.
    `anchor`: the heading's id (default nbdev's: the name, lower case); `source`, `explained`: links to add."""
    if is_private(name): return ''
    raw = obj
    obj = unwrap(obj)
    anchor = anchor or name.lower()
    h = '#' * level
    out = []
    links = []
    if source: links.append(f'[source]({source}){{ .doc-source }}')
    esc = lambda t: t.replace('_', '\\_')  # `__call__` is no emphasis, in the heading or its id
    head = f'{h} {esc(name)} {{ #{esc(anchor)} .doc-name }}'
    short = name.rsplit('.', 1)[-1]
    if inspect.isclass(obj):
        init = _init_of(obj)
        kind = 'exception' if issubclass(obj, BaseException) else 'class'
        if init is not None:
            ps, _ = params(init, drop_self=True, cls=obj)
            args = [p[0] for p in ps]
            one = f'class {short}{bases_text(obj)}:\n    def __init__(self{", " if args else ""}{", ".join(args)})'
            if len(one.splitlines()[-1]) > MAXLINE:
                one = f'class {short}{bases_text(obj)}:\n    def __init__(\n        self,\n' + \
                      ''.join(f'        {a},\n' for a in args) + '    )'
            code = one
        else:
            code = f'class {short}{bases_text(obj)}'
        table = param_table(init, drop_self=True, docs_of=obj) if init is not None else ''
    elif inspect.isroutine(obj) or isinstance(raw, property):
        is_method = '.' in name
        prefix = 'async def ' if inspect.iscoroutinefunction(obj) else 'def '
        if isinstance(raw, property): prefix = '@property\ndef '
        code = signature_text(prefix, short, obj, drop_self=is_method)
        table = param_table(obj, drop_self=is_method)
        kind = 'function'
    else:  # a constant: a line of its own, never the docstring of its type (`int([x]) -> integer`)
        return constants_markdown([(f'{short} = {_default_text(raw)}', anchor)])
    out.append(head)
    if links: out.append(' '.join(links))
    out.append(f'```python\n{code}\n```')
    doc = _own_doc(obj)
    if doc and table:  # a docstring's Args/Parameters section that filled the table: shown once, in the table
        if inspect.isclass(obj): names, ret = filled(_init_of(obj), True, obj)[0], False  # a class's Returns is not in it
        else: names, ret = filled(obj, '.' in name)
        doc = without_filled_sections(doc, names, ret)
    if doc: out.append(doc)
    if table: out.append(table)
    if explained: out.append(explained)
    body = '\n\n'.join(out)
    return f'<div class="doc-entry doc-{kind}" markdown="1">\n\n{body}\n\n</div>'


def constants_markdown(items: list, comment: str = '') -> str:
    """A line for one or more constants one statement assigns: each one's anchor and code (`(code, anchor)`, the code
    `NAME = value`), then the comment written beside them in the source. Never a docstring: a constant's is its type's."""
    def one(code, anchor):
        tick = '``' if '`' in code else '`'
        pad = ' ' if tick == '``' else ''
        return f'<span id="{anchor.replace(chr(34), "&quot;")}" class="doc-constant"></span>{tick}{pad}{code}{pad}{tick}'
    return ', '.join(one(c, a) for c, a in items) + (f': {comment}' if comment else '')


class DocRenderer:
    "nbdev's `show_doc` renderer for the site: `show_doc(sym)` -> one entry (`entry_markdown`)."
    def __init__(self, sym, name: str | None = None, title_level: int = 3, maxline: int = 110):
        self.sym, self.title_level = sym, title_level
        self.nm = name or _qual_name(sym)

    def _source(self): return source_url(self.sym)

    def _repr_markdown_(self):
        return entry_markdown(self.sym, self.nm, self.title_level, source=self._source()) or ' '

    def __repr__(self): return f'DocRenderer({self.nm})'


def source_url(obj) -> str | None:
    "The link to `obj`'s source on the code host (settings.ini's git_url), at its line; None where there is none."
    try:
        from nbdev.doclinks import NbdevLookup
        o = unwrap(obj)
        url = NbdevLookup().code(f'{o.__module__}.{o.__qualname__}')
        if url and url.endswith('#LNone'):  # nbdev finds the line from the working folder's view of the file
            url = url[:-len('None')] + str(inspect.getsourcelines(o)[1])
        return url
    except Exception: return None


def _qual_name(obj):
    try:
        from fastcore.docments import qual_name
        return qual_name(obj)
    except Exception:
        return getattr(obj, '__qualname__', getattr(obj, '__name__', repr(obj)))


def use_in_nbdev():
    "Makes `show_doc` render with `DocRenderer` in this process (the docs build's notebook workers)."
    import nbdev.showdoc as sd
    sd.BasicMarkdownRenderer = DocRenderer
