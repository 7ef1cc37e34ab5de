"""The pip wheel index: a static PEP 503 index with its PEP 691 JSON, one index per (torch minor, CUDA).

Read → resolve → write, in separate modules: `layout` names every folder and file of an index root;
`placement` decides from each wheel's own data which indexes take it; `pages` renders the pages (pure);
`folder` keeps a root consistent (survey, heal, under the lock); `publish` copies wheels in;
`read` lists a local or remote index; `validate` judges what `read` found against our rules.
"""
