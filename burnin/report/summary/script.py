"""The page's only script, inline (no library, nothing fetched): the node table sorts on
a click, and node sections kept as compressed data are drawn when opened. It draws
what sections.py and charts.py describe, block for block and primitive for primitive,
as their Python twins (block_html, section_html, svg) do for the sections written into
the page."""

from __future__ import annotations

import json

from burnin.model.outcome import Outcome
from burnin.report.summary.charts import ALPHABET, BAD, PALETTE
from burnin.report.summary.sections import KEPT_NOTE

# Compressed sections are base85 (a quarter over the bytes, base64 a third), with the
# four characters that mean something in HTML (& < > `) swapped for ones that do not.
HTML_SAFE = str.maketrans("&<>`", ",.:[")
B85_ALPHABET = ("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                "!#$%&()*+-;<=>?@^_`{|}~").translate(HTML_SAFE)  # base64.b85encode's, RFC 1924

SCRIPT = r"""(()=>{
function sortable(tb){if(!tb)return;
 tb.querySelectorAll('th').forEach((th,i)=>th.onclick=()=>{const b=tb.tBodies[0],
 r=[...b.rows],d=th.dataset.d=th.dataset.d=='1'?'-1':'1';r.sort((x,y)=>x.cells[i].innerText
 .localeCompare(y.cells[i].innerText,undefined,{numeric:true})*d);r.forEach(x=>b.appendChild(x))});
 tb.tBodies[0].onclick=e=>{const r=e.target.closest('tr');if(r&&!e.target.closest('a'))
 location.hash='n-'+r.id.slice(5)}}
const folded=document.getElementById('table-rows');
if(folded){const fill=()=>{if(!folded.isConnected)return;folded.insertAdjacentHTML('afterend',
 folded.textContent);folded.remove();sortable(document.getElementById('nodes'))};
 document.getElementById('table').addEventListener('toggle',fill);
 addEventListener('keydown',e=>{if((e.ctrlKey||e.metaKey)&&e.key=='f')fill()})}
else sortable(document.getElementById('nodes'));
const ixel=document.getElementById('sections-index');
if(!ixel){document.body.dataset.ready='1';return}
const ix=JSON.parse(ixel.textContent),where={},cache={},box=document.getElementById('drawn');
ix.c.forEach((names,i)=>names.forEach(n=>where[n]=i));
const A='%ALPHABET%',code={};[...A].forEach((c,i)=>code[c]=i);
const esc=s=>String(s??'').replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;',
 '"':'&quot;',"'":'&#39;'})[c]);
const T=t=>t?`<title>${esc(t)}</title>`:'';
function pts(xs,ys,top,ph){const o=[];for(let i=0;i<ys.length;i++)o.push(((code[xs[2*i]]*90+
 code[xs[2*i+1]])/10).toFixed(1)+','+(top+code[ys[i]]/89*ph).toFixed(1));return o.join(' ')}
function svg(c,k){if(!c)return '';const items=c.f==null?c.i:frames[c.f].concat(c.i);
 const o=[`<svg xmlns="http://www.w3.org/2000/svg" \
class="${k||'chart'}" width="${c.w}" height="${c.h}" viewBox="0 0 ${c.w} ${c.h}" role="img" \
aria-label="${esc(c.t)}">`];
 for(const it of items){const a=it[0];
  if(a=='text')o.push(`<text x="${it[1]}" y="${it[2]}" class="${esc(it[4])}"${it[5]?` fill="${
   esc(it[5])}"`:''}>${esc(it[3])}</text>`);
  else if(a=='line')o.push(`<line x1="${it[1]}" y1="${it[2]}" x2="${it[3]}" y2="${it[4]}"${it[5]?
   ` class="${esc(it[5])}"`:''}${it[6]?` stroke="${esc(it[6])}"`:''}${it[7]?
   ` stroke-dasharray="${esc(it[7])}"`:''}>${T(it[8])}</line>`);
  else if(a=='rect')o.push(`<rect x="${it[1]}" y="${it[2]}" width="${it[3]}" height="${it[4]}" \
fill="${esc(it[5])}" opacity="${it[6]}">${T(it[7])}</rect>`);
  else if(a=='poly')o.push(`<polyline points="${pts(it[1],it[2],it[6],it[7])}" fill="none" \
stroke="${esc(it[3])}" stroke-width="${it[4]}">${T(it[5])}</polyline>`);
  else if(a=='polygon')o.push(`<polygon points="${pts(it[1],it[2],it[6],it[7])}" fill="${
   esc(it[3])}" opacity="${it[4]}">${T(it[5])}</polygon>`);
  else if(a=='circle')o.push(`<circle cx="${it[1]}" cy="${it[2]}" r="${it[3]}" fill="${
   esc(it[4])}">${T(it[5])}</circle>`);
  else if(a=='path')o.push(`<path d="${esc(it[1])}" class="${esc(it[2])}"/>`)}
 return o.join('')+'</svg>'}
const WORD=%WORDS%,KEPT=%KEPT%;
const cls=o=>({passed:'pass',skipped:'skip','':'skip'})[o]??'fail';
const cell=c=>Array.isArray(c)?`<td class="${esc(c[1])}">${esc(c[0])}</td>`:`<td>${esc(c)}</td>`;
function block(b){switch(b[0]){
 case 'facts':return '<dl class="facts">'+b[1].map(([k,v])=>`<dt>${esc(k)}</dt><dd>${esc(v)
  }</dd>`).join('')+'</dl>';
 case 'table':return '<table class="figs"><thead><tr>'+b[1].map(h=>`<th>${esc(h)}</th>`)
  .join('')+'</tr></thead><tbody>'+b[2].map(r=>'<tr>'+r.map(cell).join('')+'</tr>').join('')+
  '</tbody></table>';
 case 'charts':return '<div class="charts">'+b[1].map(c=>svg(c)).join('')+'</div>';
 case 'note':return `<p class="${esc(b[2])}">${esc(b[1])}</p>`;
 case 'legend':return '<p class="legend">'+b[1].map(([n,c])=>`<span class="sw" style=\
"background:${esc(c)}"></span>${esc(n)}`).join(' ')+'</p>';
 case 'pre':return `<details><summary>stderr (last lines)</summary><pre>${esc(b[1])}</pre>\
</details>`;
 case 'sparks':return '<table class="figs"><tbody>'+b[1].map(spark).join('')+'</tbody></table>';
 case 'figs':{const ns=typeof b[1]=='number'?frames[b[1]]:b[1];return block(['table',['figure',
  'unit','value'],b[2].map((v,i)=>[...ns[i],fmt(v)])])+block(['note',KEPT,'dim'])}}
 return ''}
function fmt(v){const a=Math.abs(v);return a>=1e5?Math.round(v).toLocaleString('en').replace(
 /,/g,'\u2009'):a>=100||v==Math.round(v)?v.toFixed(0):a>=10?v.toFixed(1):a>=1?v.toFixed(2):
 String(+v.toPrecision(3))}
function spark([n,vs,moved]){const text=vs.map(v=>v==null?'–':fmt(v)).join(' → '),
 title=`<title>${esc(n+': '+text)}</title>`,p=vs.map((v,i)=>[i,v]).filter(q=>q[1]!=null);
 let s='';if(p.length){const ys=p.map(q=>q[1]),lo=Math.min(...ys),hi=Math.max(...ys),
 sp=(hi-lo)||Math.abs(hi)||1,k=Math.max(vs.length-1,1),xy=p.map(([i,v])=>[+(2+i/k*84)
 .toFixed(1),+(15-(v-lo)/sp*12).toFixed(1)]),l=xy[xy.length-1];
 s=`<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="90" height="18" viewBox=\
"0 0 90 18"><polyline points="${xy.map(q=>q.join(',')).join(' ')}" fill="none" stroke=\
"%GREY%" stroke-width="1">${title}</polyline><circle cx="${l[0]}" cy="${l[1]}" r="2.2" fill=\
"${moved?'%BAD%':'%BLUE%'}">${title}</circle></svg>`}
 return `<tr><td>${esc(n)}</td><td>${s}</td><td class="dim">${esc(text)}</td></tr>`}
function section(d){const id=esc('n-'+d.n);let h=`<section id="${id}" class="node${d.b?' bad':''
 }"><h3>${esc(d.n)}`;if(d.a)h+=` <span class="dim">${esc(d.a)}</span>`;
 for(const [k,v] of d.l)h+=` <span class="lbl">${esc(k)}=${esc(v)}</span>`;
 for(const [k,v] of d.x||[])h+=` <span class="lbl env" title="set by its probes (env:)">\
${esc(k)}=${esc(v)}</span>`;
 if(d.e)h+=` <a href="nodes/${esc(d.n)}/">evidence folder</a>`;
 h+=' <a class="up" href="#grid">back to the grid</a></h3><table class="verdicts"><tbody>';
 for(const [c,o,m] of d.v)h+=`<tr><td><a href="#${id}-${esc(c)}">${esc(c)}</a></td><td class=\
"${cls(o)}">${WORD[o]??esc(o)}</td><td class="msg">${esc(m)}</td></tr>`;
 h+='</tbody></table>';const t=d.t.map(block).join('');if(t)h+=`<div class="trend">${t}</div>`;
 h+='<div class="parts">';for(const [c,o,bs] of d.p)h+=`<div class="chk" id="${id}-${esc(c)}">\
<h4>${esc(c)} <span class="${cls(o)}">${WORD[o]??esc(o)}</span></h4>${bs.map(block)
.join('')}</div>`;
 return h+'</div></section>'}
function b85(s){const v=new Uint8Array(128),B='%B85%',pad=(5-s.length%5)%5;
 for(let i=0;i<85;i++)v[B.charCodeAt(i)]=i;s+='~'.repeat(pad);const out=new Uint8Array(
 s.length/5*4);for(let i=0,o=0;i<s.length;i+=5){let n=0;for(let j=0;j<5;j++)n=n*85+v[
 s.charCodeAt(i+j)];out[o++]=n>>>24;out[o++]=n>>>16&255;out[o++]=n>>>8&255;out[o++]=n&255}
 return out.subarray(0,out.length-pad)}
async function unpack(id){const s=document.getElementById(id).textContent,b=b85(s.trim());
 return JSON.parse(await new Response(new Blob([b]).stream().pipeThrough(
 new DecompressionStream('gzip'))).text())}
let frames=null;
async function chunk(i){if(!frames)frames=await unpack('sections-frames');
 if(!cache[i])cache[i]=await unpack('sections-'+i);return cache[i]}
async function draw(n){if(document.getElementById('n-'+n)||!(n in where))return;
 const d=(await chunk(where[n]))[n];if(document.getElementById('n-'+n))return;let h;
 try{h=section(d)}catch(e){h=`<section id="${esc('n-'+n)}" class="node"><h3>${esc(n)}</h3><p \
class="warn">could not draw this section: ${esc(e)}</p></section>`}
 box.insertAdjacentHTML('beforeend',h)}
async function show(){const id=decodeURIComponent(location.hash.slice(1));
 if(!id.startsWith('n-'))return;let n=id.slice(2);
 while(n&&!(n in where)&&!document.getElementById('n-'+n)){const k=n.lastIndexOf('-');
  n=k>0?n.slice(0,k):''}
 if(!n)return;await draw(n);const el=document.getElementById(id)||document.getElementById('n-'+n);
 if(el)el.scrollIntoView()}
addEventListener('hashchange',show);
const start=()=>(async()=>{for(const n of ix.open)await draw(n);await show();
 document.body.dataset.ready='1'})()
.catch(e=>{box.insertAdjacentHTML('beforeend',`<p class="warn">sections not drawn: ${esc(e)}</p>`);
 document.body.dataset.ready='1'});
if(ix.later)addEventListener('load',()=>requestAnimationFrame(()=>(window.requestIdleCallback||
 setTimeout)(start)));else start()})()""".replace(
    "%ALPHABET%", ALPHABET.replace("'", "\\'")).replace("%B85%", B85_ALPHABET).replace(
    "%BAD%", BAD).replace("%BLUE%", PALETTE[0]).replace("%GREY%", PALETTE[7]).replace(
    "%WORDS%", json.dumps({o.value: o.word for o in Outcome})).replace(
    "%KEPT%", json.dumps(KEPT_NOTE))
