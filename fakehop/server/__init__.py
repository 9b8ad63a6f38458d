"""The aiohttp server: protocol routes, scenario selection, the control API, the console and the
metrics. app.create_app is the one place the application is put together."""
