"""Local test hosts and test doubles (nspawn lab, test Hub, SGLang stand-in, apt repo). Never imported by roles."""
