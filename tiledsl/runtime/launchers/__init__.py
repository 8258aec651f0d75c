"""The launch mechanisms of one compiled specialization, siblings behind `base.Launcher`: the reference launcher
(check, pack, launch; always right), the generated Python launcher and the native one for the steady state
(both defer to the reference path on anything unexpected), and the interpreter's launcher for host arrays."""
