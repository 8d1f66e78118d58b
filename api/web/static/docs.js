// The API reference: Redoc, bundled and served from here, rendering /openapi.yaml. Nothing is
// fetched from elsewhere.
Redoc.init('/openapi.yaml', {
  hideDownloadButton: false,
  expandResponses: '200,201',
  jsonSampleExpandLevel: 2,
  theme: { typography: { fontFamily: 'system-ui, sans-serif', headings: { fontFamily: 'system-ui, sans-serif' }, code: { fontFamily: 'ui-monospace, monospace' } } },
}, document.getElementById('redoc'));
